#!/usr/bin/env bash
# Makes the certificates the TLS tests and benchmark use: an authority (ca.pem) that signed
# node.pem (key node.key) and rank-0.pem .. rank-4.pem (ranked certificates: their common
# names are rank-0 .. rank-4), and another authority (other_ca.pem) that signed
# stranger.pem (key stranger.key). EC P-256 keys, valid for 100 years. For tests only: the
# keys are public.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
authority() { # name subject
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500 \
        -subj "/CN=$2" -keyout "$tmp/$1.key" -out "$1.pem" 2>/dev/null
}
node() { # name authority subject
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$3" \
        -keyout "$1.key" -out "$tmp/$1.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
        > "$tmp/$1.ext"
    openssl x509 -req -in "$tmp/$1.csr" -CA "$2.pem" -CAkey "$tmp/$2.key" -CAcreateserial \
        -CAserial "$tmp/$2.srl" -days 36500 -extfile "$tmp/$1.ext" -out "$1.pem" 2>/dev/null
}
authority ca "petrel test authority"
authority other_ca "another authority"
node node ca "petrel test node"
node stranger other_ca "a node of another authority"
for r in 0 1 2 3 4; do
    node "rank-$r" ca "rank-$r"
done
