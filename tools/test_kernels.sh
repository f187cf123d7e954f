#!/usr/bin/env bash
# The model-dependent tests once per CPU kernel family torch can run on this machine (`make test-kernels`, CI;
# docs/testing.md). torch picks its CPU kernels by instruction set, and ATEN_CPU_CAPABILITY can only lower the
# choice: asked for a family the CPU (or this torch build) lacks, torch silently runs the best one it has. So a
# family runs only where torch reports it back, and is named as skipped, with the reason, where it does not.
#
#   PY            the venv's python (the Makefile passes its own)
#   KERNEL_TESTS  what to run (default: tests/engine tests/modeling tests/training), always -m "not slow"
#   KERNEL_CAPS   the families to try (default: default avx2 avx512)
set -uo pipefail

PY=${PY:-.venv/bin/python}
read -r -a tests <<< "${KERNEL_TESTS:-tests/engine tests/modeling tests/training}"
read -r -a caps <<< "${KERNEL_CAPS:-default avx2 avx512}"

summary=()
failed=0
for cap in "${caps[@]}"; do
    got=$(ATEN_CPU_CAPABILITY=$cap "$PY" -c 'import torch; print(torch.backends.cpu.get_cpu_capability())') || {
        summary+=("$cap: FAILED (torch did not start)"); failed=1; continue; }
    if [[ ${got,,} != "$cap" ]]; then
        flag=${cap/avx512/avx512f}
        why="the CPU has no $flag flag in /proc/cpuinfo"
        grep -qw "$flag" /proc/cpuinfo 2>/dev/null && why="the CPU has $flag, this torch build does not run it"
        summary+=("$cap: skipped (torch runs $got when asked for $cap: $why)")
        continue
    fi
    echo "== test-kernels: ATEN_CPU_CAPABILITY=$cap (torch reports $got)"
    start=$SECONDS
    ATEN_CPU_CAPABILITY=$cap "$PY" -m pytest -q -m "not slow" -p no:cacheprovider --durations=5 "${tests[@]}"
    rc=$?
    if [[ $rc == 0 ]]; then
        summary+=("$cap: passed in $((SECONDS - start)) s")
    else
        summary+=("$cap: FAILED (pytest exit $rc) in $((SECONDS - start)) s"); failed=1
    fi
done

echo "== test-kernels: ${tests[*]} (-m 'not slow')"
printf '   %s\n' "${summary[@]}"
exit $failed
