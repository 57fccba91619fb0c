#!/usr/bin/env bash
# A run's credentials (seedlike/rpc/security.py; docs/security.md): a CA of the run's own, the
# learner's certificate, a run token, and one certificate per actor, each naming its identity.
#
#   scripts/make_credentials.sh DIR HOST [HOST ...]           a new run: CA, learner certificate
#                                                              (valid for each HOST, localhost and
#                                                              127.0.0.1) and token
#   scripts/make_credentials.sh --actors DIR NAME [NAME ...]  one certificate per actor (or actor
#                                                              host): DIR/actors/NAME/
#   scripts/make_credentials.sh --revoke DIR NAME [NAME ...]  the learner refuses NAME within a
#                                                              second and ends its open streams
#   scripts/make_credentials.sh --rotate DIR HOST [HOST ...]  a new learner certificate; the
#                                                              running learner serves it to new
#                                                              connections, open ones go on
#
# The learner reads DIR/{ca.pem,server.pem,server.key,token,revoked}. Copy DIR/actors/NAME (ca.pem,
# client.pem, client.key, token) to the machine of actor NAME and nothing else; keep ca.key where
# certificates are issued. Every stream under one certificate is one identity to the learner,
# whatever actor id it declares.
set -Eeuo pipefail
shopt -s inherit_errexit  # a failure inside $(...) ends the script too
usage() {
  sed -n '5,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
mode=init
case "${1:-}" in
  --actors | --revoke | --rotate) mode=${1#--} && shift ;;
  -*) usage ;;
esac
[ "$#" -ge 2 ] || usage
dir=$1
shift
command -v openssl >/dev/null || { echo "needs openssl (apt-get install -y openssl)" >&2; exit 1; }
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

# issue NAME SUBJECT EXTENSIONS: DIR/NAME.{pem,key} signed by the run's CA.
issue() {
  local out=$1 subject=$2 ext=$3
  openssl req "${key[@]}" -keyout "$out.key" -out "$out.csr" -subj "$subject" 2>/dev/null
  printf '%b' "$ext" > "$out.ext"
  openssl x509 -req -in "$out.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$out.pem" -days 825 -extfile "$out.ext" 2>/dev/null
  rm -f "$out.csr" "$out.ext" "$dir/ca.srl"
  chmod 600 "$out.key"
}

# server_certificate HOST...: a new DIR/server.{pem,key} valid for each HOST; sets $san.
server_certificate() {
  local host
  rm -f "$dir"/server.next.*  # what a failed attempt left
  san="DNS:localhost,IP:127.0.0.1"
  for host in "$@"; do
    if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
  done
  # Issued beside the old pair and checked (the key is the certificate's) before it replaces it:
  # a failed rotation leaves the learner's files as they were. (A learner that reads the files
  # between the two renames fails that one handshake; its next one reads the new pair.)
  issue "$dir/server.next" "/CN=seedlike server" \
    "subjectAltName=$san\nextendedKeyUsage=serverAuth\n"
  if [ "$(openssl x509 -in "$dir/server.next.pem" -noout -pubkey)" != \
    "$(openssl pkey -in "$dir/server.next.key" -pubout)" ]; then
    echo "the new server certificate does not match its key" >&2
    exit 1
  fi
  mv "$dir/server.next.key" "$dir/server.key"
  mv "$dir/server.next.pem" "$dir/server.pem"
}

need_ca() {
  [ -f "$dir/ca.key" ] || { echo "$dir has no ca.key: make the run with $0 DIR HOST" >&2; exit 1; }
}

case $mode in
  init)
    if [ -e "$dir/ca.pem" ]; then
      echo "$dir already holds credentials; remove it or choose another directory" >&2
      exit 1
    fi
    mkdir -p "$dir"
    chmod 700 "$dir"
    trap 'echo "making $dir failed (above); remove it and run this again" >&2' ERR
    openssl req -x509 "${key[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 3650 \
      -subj "/CN=seedlike run CA" 2>/dev/null
    server_certificate "$@"
    openssl rand -hex 32 > "$dir/token"
    : > "$dir/revoked"
    chmod 600 "$dir/ca.key" "$dir/token"
    echo "wrote $dir: ca.pem ca.key server.pem server.key token revoked ($san); issue actors'" \
      "certificates with $0 --actors $dir NAME..."
    ;;
  actors)
    need_ca
    for name in "$@"; do
      if ! [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$ ]]; then
        echo "actor name '$name': letters, digits, '.', '_' and '-' only (63 at most)" >&2
        exit 2
      fi
      out="$dir/actors/$name"
      if [ -e "$out/client.pem" ]; then
        echo "$out already holds a certificate; revoke it and choose another name" >&2
        exit 1
      fi
      mkdir -p "$out"
      chmod 700 "$dir/actors" "$out"
      # The identity is the subject's common name; the learner reads it from the verified chain.
      issue "$out/client" "/CN=seedlike actor $name" "extendedKeyUsage=clientAuth\n"
      cp "$dir/ca.pem" "$out/ca.pem"
      install -m 600 "$dir/token" "$out/token"
      echo "wrote $out: ca.pem client.pem client.key token (identity $name)"
    done
    ;;
  revoke)
    [ -f "$dir/ca.pem" ] || { echo "$dir holds no run's credentials (no ca.pem)" >&2; exit 1; }
    for name in "$@"; do
      if [ ! -e "$dir/actors/$name" ]; then
        echo "note: $dir/actors/$name does not exist (issued elsewhere, or a typo?)" >&2
      fi
      grep -qxF -- "$name" "$dir/revoked" 2>/dev/null || echo "$name" >> "$dir/revoked"
      echo "revoked $name: the learner refuses it within a second (and ends its open streams)"
    done
    ;;
  rotate)
    need_ca
    server_certificate "$@"
    echo "wrote a new $dir/server.pem ($san): new connections get it, open ones go on"
    ;;
esac
