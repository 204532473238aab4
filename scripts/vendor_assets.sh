#!/usr/bin/env bash
# Refresh the self-hosted front-end assets under docs/vendor/ from the npm registry.
# The site serves these files itself, so pages render math with no network.
# Usage: bash scripts/vendor_assets.sh [katex-version]
set -euo pipefail
version="${1:-0.19.1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/docs/vendor/katex"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "katex@$version" >/dev/null && tar xzf "katex-$version.tgz")
rm -rf "$dest"
mkdir -p "$dest/fonts" "$dest/contrib"
cp "$work/package/dist/katex.min.js" "$work/package/dist/katex.min.css" "$dest/"
cp "$work/package/dist/contrib/auto-render.min.js" "$dest/contrib/"
# Browsers that run the site all take woff2, the first source in katex.min.css.
cp "$work/package/dist/fonts/"*.woff2 "$dest/fonts/"
cp "$work/package/LICENSE" "$dest/LICENSE"
echo "KaTeX $version" > "$dest/VERSION"
echo "vendored KaTeX $version into $dest"

# Material's offline plugin adds the iframe-worker shim (search from file://);
# serve it from the site too, or the offline build would fetch it from a CDN.
iw_version="${IFRAME_WORKER_VERSION:-1.0.4}"
iw_dest="$root/docs/vendor/iframe-worker"
(cd "$work" && npm pack --silent "iframe-worker@$iw_version" >/dev/null && mkdir iw && tar xzf "iframe-worker-$iw_version.tgz" -C iw)
rm -rf "$iw_dest"; mkdir -p "$iw_dest"
cp "$work/iw/package/shim/index.js" "$iw_dest/shim.js"
cp "$work/iw/package/LICENSE" "$iw_dest/LICENSE"
echo "iframe-worker $iw_version" > "$iw_dest/VERSION"
echo "vendored iframe-worker $iw_version into $iw_dest"
