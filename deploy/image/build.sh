#!/usr/bin/env bash
# Builds an OCI image of `writ` from nothing (no base image, no registry, no container engine):
# one layer holding the binary, the shared libraries it links and their loader (from `ldd`),
# the CA certificates of this machine, and an unprivileged user (uid 10001). Writes an OCI image
# layout (deterministic: sorted, zero mtimes) and the same as an oci-archive tarball:
#
#   deploy/image/build.sh [BINARY] [OUT_DIR]      # defaults: the release build, .writ/image
#   podman run --rm oci-archive:.writ/image/writ-oci.tar --version
#
# Also leaves OUT_DIR/rootfs (the layer's files), so `chroot OUT_DIR/rootfs /usr/local/bin/writ`
# shows the image is complete without any engine.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${1:-${CARGO_TARGET_DIR:-$ROOT/target}/release/writ}"
OUT="${2:-$ROOT/.writ/image}"
TAG="${WRIT_IMAGE_TAG:-0.1.0}"
[ -x "$BIN" ] || { echo "build.sh: $BIN is missing (cargo build --release --bins)" >&2; exit 1; }

rm -rf "$OUT" && mkdir -p "$OUT/rootfs" "$OUT/layout/blobs/sha256"
R="$OUT/rootfs"
mkdir -p "$R/usr/local/bin" "$R/etc/ssl/certs" "$R/tmp" "$R/var/lib/writ" "$R/etc/writ"
chmod 1777 "$R/tmp"
cp "$BIN" "$R/usr/local/bin/writ"
command -v strip >/dev/null && strip --strip-debug "$R/usr/local/bin/writ"
# The libraries the binary links, and the dynamic loader, at their paths.
for lib in $(ldd "$BIN" | awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'); do
  mkdir -p "$R$(dirname "$lib")"
  cp -L "$lib" "$R$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/" 2>/dev/null || true
printf 'root:x:0:0::/:/sbin/nologin\nwrit:x:10001:10001::/var/lib/writ:/sbin/nologin\n' > "$R/etc/passwd"
printf 'root:x:0:\nwrit:x:10001:\n' > "$R/etc/group"

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blob() { # file -> moves it into blobs, prints its digest
  local d; d="$(sha "$1")"; mv "$1" "$OUT/layout/blobs/sha256/$d"; echo "$d"
}

tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$R" -cf "$OUT/layer.tar" .
diff_id="$(sha "$OUT/layer.tar")"
gzip -n -6 "$OUT/layer.tar"
layer_size="$(size "$OUT/layer.tar.gz")"
layer="$(blob "$OUT/layer.tar.gz")"

cat > "$OUT/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"User":"10001:10001","Entrypoint":["/usr/local/bin/writ"],"WorkingDir":"/var/lib/writ","Env":["PATH=/usr/local/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],"Labels":{"org.opencontainers.image.title":"writ","org.opencontainers.image.version":"$TAG"}},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created_by":"deploy/image/build.sh"}]}
JSON
config_size="$(size "$OUT/config.json")"
config="$(blob "$OUT/config.json")"

cat > "$OUT/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$layer_size}]}
JSON
manifest_size="$(size "$OUT/manifest.json")"
manifest="$(blob "$OUT/manifest.json")"

echo '{"imageLayoutVersion":"1.0.0"}' > "$OUT/layout/oci-layout"
cat > "$OUT/layout/index.json" <<JSON
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$manifest_size,"annotations":{"org.opencontainers.image.ref.name":"$TAG"}}]}
JSON
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$OUT/layout" -cf "$OUT/writ-oci.tar" .
echo "image: $OUT/writ-oci.tar (layer $(( layer_size / 1024 / 1024 )) MiB, manifest sha256:$manifest)"
