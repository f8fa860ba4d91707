#!/usr/bin/env bash
# Builds the benchmark programs, runs them, collects their JSON into one
# file and prints a table of each figure against its same-run baseline and
# its aim.
#
#   scripts/bench.sh [-o FILE] [BUILD_DIR]
#
# BUILD_DIR defaults to build/ (configured and built by scripts/build.sh,
# RelWithDebInfo); FILE defaults to BUILD_DIR/bench.json: one JSON object
# keyed by bench (vm, kernels, rpc, timing, memory, isolate) plus "meta" (host,
# load average before and after). VMRPC_BENCH_ONLY="rpc memory" runs a
# subset. A bench that fails is recorded as {"error": ...} and makes the
# script exit 1 once the others ran; a missed aim does not (it is a figure,
# reported in the table). From a fresh clone on the 2-core test machine the
# whole run (build included) takes about 5 minutes; docs/performance.md
# has the figures and what limits each.
set -euo pipefail
cd "$(dirname "$0")/.."

out=""
if [ "${1:-}" = "-o" ]; then
  out=${2:?"-o needs a file"}
  shift 2
fi
dir=${1:-build}
out=${out:-$dir/bench.json}
benches=${VMRPC_BENCH_ONLY:-"vm kernels rpc timing memory isolate"}

targets="vmagent"
for b in $benches; do targets="$targets bench_$b"; done
VMRPC_TARGETS="$targets" scripts/build.sh "$dir"

export VMRPC_BUILD_DIR=$PWD/$dir
# PoCL's kernel cache inside the build tree, as scripts/test.sh does.
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$VMRPC_BUILD_DIR/pocl-cache}
mkdir -p "$POCL_CACHE_DIR" "$VMRPC_BUILD_DIR/test-cache"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
failed=0
for b in $benches; do
  prog=$dir/bench/bench_$b
  echo "== bench_$b" >&2
  start=$(date +%s)
  if [ ! -x "$prog" ]; then
    echo "{\"error\":\"bench_$b was not built (missing dependency?)\"}" >"$tmp/$b.json"
    failed=1
  elif "$prog" >"$tmp/$b.out" 2>"$tmp/$b.err"; then
    # the JSON object is the last line that starts with '{'
    { grep '^{' "$tmp/$b.out" || true; } | tail -n 1 >"$tmp/$b.json"
  else
    rc=$?
    cat "$tmp/$b.err" >&2
    echo "{\"error\":\"bench_$b exited with status $rc\"}" >"$tmp/$b.json"
    failed=1
  fi
  [ -s "$tmp/$b.json" ] || { echo '{"error":"no JSON output"}' >"$tmp/$b.json"; failed=1; }
  echo "   $(($(date +%s) - start)) s" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")

{
  printf '{"meta":{"host":"%s","nproc":%s,"date":"%s","commit":"%s","loadavg_before":"%s","loadavg_after":"%s"}' \
    "$(uname -srm)" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$load_before" "$load_after"
  for b in $benches; do
    printf ',"%s":' "$b"
    tr -d '\n' <"$tmp/$b.json"
  done
  printf '}\n'
} >"$out"
echo "bench.sh: wrote $out" >&2

# ------------------------------------------------------------------ table
# num BENCH KEY: the number stored under KEY in BENCH's object ("" if none).
num() {
  { grep -o "\"$2\": *[-0-9.eE+]*" "$tmp/$1.json" 2>/dev/null || true; } | head -n 1 |
    sed 's/.*: *//'
}

# row BENCH NAME FIGURE_KEY BASELINE_KEY RATIO_KEY AIM
#   AIM: le:X (ratio <= X), ge:X, within:LO:HI, or "-" (none). Keys may be
#   "-" (no such column). When RATIO_KEY is "-" the aim applies to the
#   figure itself.
row() {
  local b=$1 name=$2 fk=$3 bk=$4 rk=$5 aim=$6
  local f="-" base="-" ratio="-" met="-" aimtxt="-" v
  [ "$fk" != - ] && f=$(num "$b" "$fk")
  [ "$bk" != - ] && base=$(num "$b" "$bk")
  [ "$rk" != - ] && ratio=$(num "$b" "$rk")
  f=${f:-n/a}
  base=${base:-n/a}
  ratio=${ratio:-n/a}
  v=$ratio
  [ "$rk" = - ] && v=$f
  case $aim in
    le:*) aimtxt="<= ${aim#le:}" ;;
    ge:*) aimtxt=">= ${aim#ge:}" ;;
    within:*) aimtxt="${aim#within:}"; aimtxt="${aimtxt/:/ .. }" ;;
  esac
  if [ "$aim" != - ]; then
    if [ "$v" = n/a ]; then
      met="n/a"
    else
      met=$(awk -v v="$v" -v aim="$aim" 'BEGIN {
        n = split(aim, a, ":");
        ok = (a[1] == "le" && v <= a[2]) || (a[1] == "ge" && v >= a[2]) ||
             (a[1] == "within" && v >= a[2] && v <= a[3]);
        print ok ? "yes" : "NO" }')
    fi
  fi
  printf '%-8s %-34s %14s %14s %9s %13s %5s\n' "$b" "$name" "$f" "$base" "$ratio" "$aimtxt" "$met"
}

has() { case " $benches " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

printf '%-8s %-34s %14s %14s %9s %13s %5s\n' bench figure value baseline ratio aim met?
printf '%s\n' "-------------------------------------------------------------------------------------------------"
if has vm; then
  row vm "Call, bytecode (ns) / memcpy 64 B" ns_per_call_bytecode memcpy_ns_per_64B bytecode_call_vs_memcpy_64B -
  row vm "Call, compiled (ns) / memcpy 64 B" ns_per_call_compiled memcpy_ns_per_64B compiled_call_vs_memcpy_64B -
fi
if has kernels; then
  for n in 256 512 1024; do
    row kernels "gemm $n GFLOP/s / OpenBLAS" gemm_gflops_$n openblas_gflops_$n gemm_ratio_$n -
  done
  row kernels "add GB/s / memcpy" add_gbps memcpy_gbps add_ratio -
  row kernels "cached build ms (first: baseline)" cached_build_ms first_build_ms cache_speedup -
fi
if has rpc; then
  row rpc "Ping RTT us / raw TCP" ping_rtt_us raw_tcp_rtt_us rtt_ratio le:1.5
  row rpc "GetOutput 4 B RTT us / raw TCP" get_output4_rtt_us raw_tcp_rtt_us get_output4_rtt_ratio -
  row rpc "bare nng req/rep RTT us / raw TCP" nng_rtt_us raw_tcp_rtt_us nng_rtt_ratio -
  row rpc "transport layer RTT us / raw TCP" transport_rtt_us raw_tcp_rtt_us transport_rtt_ratio -
  for n in 1 64 256; do
    aim=ge:0.8
    [ $n = 1 ] && aim=-
    row rpc "upload $n MiB GB/s / best raw TCP" upload_gbps_$n raw_tcp_gbps_$n upload_ratio_$n $aim
    row rpc "download $n MiB GB/s / best raw TCP" download_gbps_$n raw_tcp_gbps_$n download_ratio_$n $aim
  done
  for n in 64 256; do
    row rpc "upload $n MiB, client mallopt" upload_gbps_${n}_client_mallopt \
      raw_tcp_gbps_${n}_client_mallopt upload_ratio_${n}_client_mallopt ge:0.8
    row rpc "download $n MiB, client mallopt" download_gbps_${n}_client_mallopt \
      raw_tcp_gbps_${n}_client_mallopt download_ratio_${n}_client_mallopt ge:0.8
  done
  row rpc "store-hit re-upload ms / cold" store_hit_upload_ms cold_upload_ms store_hit_ratio le:0.02
  row rpc "  same, from memory (hashes again)" store_hit_memory_upload_ms cold_upload_ms \
    store_hit_memory_ratio le:0.02
fi
if has timing; then
  row timing "remote median s / local" remote_median_s local_median_s ratio within:0.95:1.05
  row timing "  while 64 MiB streams in / quiet" contended_median_s remote_median_s \
    contended_ratio within:0.95:1.05
fi
if has memory; then
  row memory "idle RSS KiB, --device cpu" rss_idle_cpu_only_kib - - le:8192
  row memory "idle RSS KiB, all devices" rss_idle_kib - - le:8192
  row memory "RSS KiB after cycles / warm" rss_after_kib rss_warm_kib rss_growth_ratio le:1.0
  row memory "device allocs, last 90% cycles" device_allocs_delta - - le:0
fi
if has isolate; then
  # figure: --isolate session; baseline: --isolate none; ratio: the cost
  row isolate "Ping us (agent answers; control)" ping_us_session ping_us_none ping_us_ratio -
  row isolate "GetOutput 4 B us, isolated" get_output4_us_session get_output4_us_none get_output4_us_ratio -
  row isolate "Invoke cpu identity us, isolated" invoke_cpu_us_session invoke_cpu_us_none invoke_cpu_us_ratio -
  row isolate "Invoke MLP opencl:0 us, isolated" invoke_mlp_us_session invoke_mlp_us_none invoke_mlp_us_ratio -
  row isolate "upload 64 MiB GB/s, isolated" upload_gbps_64_session upload_gbps_64_none upload_gbps_64_ratio -
  row isolate "download 64 MiB GB/s, isolated" download_gbps_64_session download_gbps_64_none download_gbps_64_ratio -
  row isolate "new session ms, isolated (spare)" new_session_ms_session new_session_ms_none new_session_ms_ratio -
  row isolate "new session ms, isolated, no spare" new_session_cold_ms new_session_ms_none - -
fi
exit $failed
