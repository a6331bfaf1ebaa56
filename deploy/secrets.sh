#!/usr/bin/env bash
# Write the secrets docker-compose.yml reads as files (compose `secrets:`), each a fresh random
# value, into secrets/ beside it (or DIR, from the repository root). A file that exists already is kept: run it again
# safely; delete a file to make a new one (then restart what reads it).
#
#   bash deploy/secrets.sh [DIR]
#
#   api_keys                the API keys, one 'role:key' entry a line: admin, train, and predict
#                           (the prometheus_api_key); add or change entries by hand
#   prometheus_api_key      the `predict` key Prometheus scrapes /metrics with
#   redis_password          Redis's password (redis and every API replica read it)
#   grafana_admin_password  Grafana's `admin` password
#
# The folder is private to its owner (0700). The files are 0444: the containers run as their
# own users, and compose mounts each file as it is, so they must be able to read it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-secrets}
(umask 077 && mkdir -p "$dir")
chmod 700 "$dir"

random_hex() {  # $1 bytes from the kernel's generator, as hex
  od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

write() {  # write FILE: the rest of the input, unless FILE exists
  local path="$dir/$1"
  if [ -e "$path" ]; then
    cat > /dev/null  # (the writer of the input must not die of a closed pipe)
    echo "kept    $path"
    return
  fi
  (umask 077 && cat > "$path")
  chmod 444 "$path"
  echo "written $path"
}

random_hex 24 | write prometheus_api_key
write api_keys <<KEYS
# role:key, one a line (the service's PERCEPTRON_API_KEYS_FILE); clients send
# 'Authorization: Bearer <key>'.
admin:$(random_hex 24)
train:$(random_hex 24)
predict:$(cat "$dir/prometheus_api_key")
KEYS
random_hex 32 | write redis_password
random_hex 16 | write grafana_admin_password
