# Sourced by the scripts in scripts/rfl/: the toolchain for the kernel's Rust (Debian rustc-web,
# whose `core` source is rust-web-src; NOT rustup's rustc, which has no matching core source).
RFL_CACHE="${RFL_CACHE:-/var/cache/ftrace-rs/rfl}"
RUSTC_BIN="${RUSTC_BIN:-/usr/bin/rustc}"
RUSTC_VERSION="$("$RUSTC_BIN" --version | awk '{print $2}')"
RUST_LIB_SRC="${RUST_LIB_SRC:-/usr/src/rustc-$RUSTC_VERSION/library}"
BINDGEN_BIN="${BINDGEN_BIN:-$(command -v bindgen || echo "${CARGO_HOME:-$HOME/.cargo}/bin/bindgen")}"
# HOSTRUSTC must be the same compiler: it builds libmacros.so, a proc-macro RUSTC loads.
KMAKE_VARS=(RUSTC="$RUSTC_BIN" HOSTRUSTC="$RUSTC_BIN" BINDGEN="$BINDGEN_BIN" RUST_LIB_SRC="$RUST_LIB_SRC")
JOBS="${JOBS:-2}"
