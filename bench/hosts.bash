# bench/hosts.bash - the start of a benchmark on hosts emulated by
# tests/cluster.sh; sourced, from the source tree's root, with
#   BH_NAME   the benchmark's name (for its messages)
#   BH_N      how many hosts
# Sources the tests' libraries, says why and exits 0 where no cluster can
# be made here (it needs root), builds bench/allreduce.c as $T/allreduce
# (DP_ALLREDUCE: a build of it to use instead, as scripts/device-kit packs),
# starts the hosts h1..h$BH_N (removed at exit), with Open MPI's TCP
# between them and shared memory within each (CL_BTL).
set -u
. tests/lib.sh
. tests/mpi.sh
. tests/cluster.sh
why=$(cluster_skip_reason)
if [ -n "$why" ]; then
	echo "$BH_NAME: skipped: $why"
	exit 0
fi
if [ -n "${DP_ALLREDUCE:-}" ]; then # built already (the device kit's)
	ln -s "$DP_ALLREDUCE" "$T/allreduce"
else
	cc -O2 -Ilib -o "$T/allreduce" bench/allreduce.c -L"$DP_BUILD" -ldp -Wl,-rpath,"$DP_BUILD" || exit 1
fi
cluster_start "$BH_N" || { echo "$BH_NAME: no cluster"; exit 1; }
export CL_BTL=tcp,vader,self
