#!/usr/bin/env bash
# Makes a credentials directory for actors on other machines (seedlike/rpc/security.py): a CA of
# the run's own, the learner's certificate (valid for each HOST given, localhost and 127.0.0.1),
# the actors' certificate and a random run token.
#
#   scripts/make_credentials.sh DIR HOST [HOST ...]      e.g. creds learner-1 10.0.0.5
#
# The learner needs DIR/{ca.pem,server.pem,server.key,token}; copy only DIR/{ca.pem,client.pem,
# client.key,token} to actor machines, and keep ca.key private (it issues certificates).
set -euo pipefail
if [ "$#" -lt 2 ]; then
  echo "usage: $0 DIR HOST [HOST ...]  (the names or addresses actors use to reach the learner)" >&2
  exit 2
fi
dir=$1
shift
if [ -e "$dir/ca.pem" ]; then
  echo "$dir already holds credentials; remove it or choose another directory" >&2
  exit 1
fi
command -v openssl >/dev/null || { echo "needs openssl (apt-get install -y openssl)" >&2; exit 1; }
mkdir -p "$dir"
chmod 700 "$dir"
san="DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
  if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
done
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${key[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 3650 \
  -subj "/CN=seedlike run CA" 2>/dev/null
for side in server client; do
  openssl req "${key[@]}" -keyout "$dir/$side.key" -out "$dir/$side.csr" \
    -subj "/CN=seedlike $side" 2>/dev/null
  if [ "$side" = server ]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$dir/$side.ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' > "$dir/$side.ext"
  fi
  openssl x509 -req -in "$dir/$side.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$side.pem" -days 825 -extfile "$dir/$side.ext" 2>/dev/null
  rm "$dir/$side.csr" "$dir/$side.ext"
done
rm -f "$dir/ca.srl"
openssl rand -hex 32 > "$dir/token"
chmod 600 "$dir"/*.key "$dir/token"
echo "wrote $dir: ca.pem ca.key server.pem server.key client.pem client.key token ($san)"
