"""What start-up refuses: the API keys and the Redis password, read from the settings.

Light on purpose (no app, no metrics): ``perceptron serve`` checks these once before it starts
any worker, since a worker that fails its start-up would only be started again and again;
create_app and the store then use the same functions.
"""

from __future__ import annotations

import logging

from service.api.auth import KeyRing
from service.settings import Settings
from service.store.connect import redis_password

log = logging.getLogger("perceptron")


def load_keys(settings: Settings, *, warn_auth_off: bool = True) -> KeyRing | None:
    """The API keys, or None when auth is off (said loudly, unless ``warn_auth_off`` is False:
    a worker of ``perceptron serve``, which said it once for all); fails at start-up on a bad
    configuration."""
    if not settings.auth:
        if warn_auth_off:
            log.warning(
                "AUTH IS OFF (PERCEPTRON_AUTH=false): anyone who can reach this service may "
                "predict, train, create and delete models. Use this for local work only."
            )
        return None
    secret = settings.api_keys.get_secret_value() if settings.api_keys else None
    keys = KeyRing.load(secret, settings.api_keys_file)
    if not keys.entries:
        raise RuntimeError(
            "Auth is on but no API key is configured: set PERCEPTRON_API_KEYS (or "
            "PERCEPTRON_API_KEYS_FILE) to entries 'role:key', or PERCEPTRON_AUTH=false for "
            "local use."
        )
    return keys


def check_settings(settings: Settings) -> None:
    """Raises ValueError, OSError or RuntimeError, with a message naming the setting or file."""
    load_keys(settings)
    redis_password(settings)
