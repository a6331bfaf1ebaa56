#!/bin/sh
# Start redis-server with its password read from a file (a compose secret), so that it is on no
# command line, in no environment and in no `docker inspect`. Refuses to start without one:
# Redis is never run open. docker-compose.yml runs this as the redis container's entrypoint;
# deploy/topology.py runs it on loopback.
#
#   sh deploy/redis-start.sh [redis-server arguments...]
#
# REDIS_PASSWORD_FILE  the password (default /run/secrets/redis_password); its content less
#                      trailing newlines, as the service reads PERCEPTRON_REDIS_PASSWORD_FILE
# REDIS_CONF           the configuration (default /usr/local/etc/redis/redis.conf)
# REDIS_RUN_DIR        where the ACL file is written (default /tmp/redis-acl: a tmpfs in compose)
set -eu
password_file=${REDIS_PASSWORD_FILE:-/run/secrets/redis_password}
conf=${REDIS_CONF:-/usr/local/etc/redis/redis.conf}
run_dir=${REDIS_RUN_DIR:-/tmp/redis-acl}

password=""
[ -r "$password_file" ] && password=$(cat "$password_file")
if [ -z "$password" ]; then
  echo "redis-start: no password in $password_file; Redis is not started without one" \
    "(bash deploy/secrets.sh writes secrets/redis_password)" >&2
  exit 1
fi

# The ACL file holds the password's SHA-256 only, never the password itself, and only the
# user running Redis may read it.
umask 077
mkdir -p "$run_dir"
hash=$(printf '%s' "$password" | sha256sum | cut -d' ' -f1)
printf 'user default on #%s ~* &* +@all\n' "$hash" > "$run_dir/users.acl"
unset password hash
exec redis-server "$conf" --aclfile "$run_dir/users.acl" "$@"
