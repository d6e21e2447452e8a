#!/bin/bash
# Installs what the Rust-for-Linux integration test needs on a Debian 12 (bookworm) x86_64 host:
# the kernel source, the Debian rustc that matches its own `core` source (rustc-web +
# rust-web-src, same version: the kernel's rust/ builds `core` from that source), libclang,
# bindgen-cli from crates.io (Debian's bindgen is older than 6.12's minimum 0.65.1), QEMU and a
# static busybox for the guest. Idempotent: packages already present are not touched.
#
# Env: RFL_RUSTC_WEB_VER=<debian version> pins rustc-web/rust-web-src (default: apt's candidate).
set -euo pipefail

APT=(apt-get -y -o DPkg::Lock::Timeout=900)
SUDO=()
[ "$(id -u)" = 0 ] || SUDO=(sudo)

PKGS=(linux-source-6.12 libclang-dev qemu-system-x86 busybox-static flex bison bc libelf-dev
      libssl-dev cpio xz-utils kmod gcc make python3)
if [ -n "${RFL_RUSTC_WEB_VER:-}" ]; then
  PKGS+=("rustc-web=$RFL_RUSTC_WEB_VER" "rust-web-src=$RFL_RUSTC_WEB_VER"
         "libstd-rust-web-dev=$RFL_RUSTC_WEB_VER")
else
  PKGS+=(rustc-web rust-web-src)
fi

missing=()
for p in "${PKGS[@]}"; do
  name="${p%%=*}"
  want="${p#*=}"; [ "$want" = "$p" ] && want=""
  have="$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)"
  case "$have" in
    "install ok installed "*)
      if [ -n "$want" ] && [ "${have##* }" != "$want" ]; then missing+=("$p"); fi ;;
    *) missing+=("$p") ;;
  esac
done

# rustc-web and rust-web-src must be the same version (the kernel compiles that `core`).
if [ ${#missing[@]} -gt 0 ]; then
  echo "install: apt-get install ${missing[*]}"
  "${SUDO[@]}" "${APT[@]}" update >/dev/null || echo "install: apt-get update failed, trying anyway"
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" "${APT[@]}" install --no-install-recommends "${missing[@]}"
else
  echo "install: all Debian packages present"
fi
rv="$(dpkg-query -W -f='${Version}' rustc-web)"
sv="$(dpkg-query -W -f='${Version}' rust-web-src)"
if [ "$rv" != "$sv" ]; then
  echo "install: rustc-web $rv and rust-web-src $sv differ; aligning rust-web-src"
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" "${APT[@]}" install --no-install-recommends \
    "rustc-web=$rv" "rust-web-src=$rv"
fi

# bindgen-cli from crates.io, into cargo's bin dir (not the system).
BINDGEN="$(command -v bindgen || true)"
[ -n "$BINDGEN" ] || BINDGEN="${CARGO_HOME:-$HOME/.cargo}/bin/bindgen"
if ! [ -x "$BINDGEN" ] || ! "$BINDGEN" --version >/dev/null 2>&1; then
  echo "install: cargo install --locked bindgen-cli"
  nice -n 15 cargo install --locked bindgen-cli -j"${JOBS:-2}"
else
  echo "install: $("$BINDGEN" --version) present"
fi
