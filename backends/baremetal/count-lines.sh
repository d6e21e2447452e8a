#!/bin/sh
# Lines of the bare-metal backend by role: code lines (no blank lines, no comment lines),
# and of those the host unit tests (from a `#[cfg(test)]` line followed by `mod tests` to the end
# of the file). Every source file belongs to one role: a file in no role is reported.
# Run from anywhere: sh backends/baremetal/count-lines.sh
cd "$(dirname "$0")" || exit 1
count() {
    role=$1
    shift
    total=0
    tests=0
    for f in "$@"; do
        set -- $(awk '
            prev ~ /^#\[cfg\(test\)\]/ && $0 ~ /^mod tests/ { intest = 1; test++ }
            { prev = $0 }
            { t = $0; sub(/^[ \t]+/, "", t) }
            t == "" || t ~ /^\/\// { next }
            { code++; if (intest) test++ }
            END { printf "%d %d\n", code, test }' "$f")
        total=$((total + $1))
        tests=$((tests + $2))
    done
    printf '%-12s %5d code lines (%d of them host unit tests)\n' "$role" "$total" "$tests"
}
count platform src/lib.rs src/platform.rs src/cpu.rs src/clock.rs src/text.rs src/sites.rs \
    src/sync.rs src/port.rs
count trampolines src/trampoline.rs
count demo src/idt.rs src/apic.rs src/timer.rs src/events.rs src/smp.rs src/serial.rs \
    src/shell.rs src/rt.rs src/qemu.rs kernel/src/main.rs kernel/src/workload.rs kernel/src/boot.S
roles="src/lib.rs src/platform.rs src/cpu.rs src/clock.rs src/text.rs src/sites.rs src/sync.rs
    src/port.rs src/trampoline.rs src/idt.rs src/apic.rs src/timer.rs src/events.rs src/smp.rs
    src/serial.rs src/shell.rs src/rt.rs src/qemu.rs"
for f in src/*.rs; do
    case " $(echo $roles) " in
    *" $f "*) ;;
    *) echo "in no role: $f" ;;
    esac
done
