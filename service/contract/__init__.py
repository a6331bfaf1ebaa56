"""What Python and the store's Lua share, and the bytes the service reads and writes:
record layouts and status codes, names, the learn requests handed to a writer, the export file."""
