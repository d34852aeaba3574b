# tests/mpi.sh - helpers of the tests that run a real mpirun (Open MPI).
# Source after tests/lib.sh.
#
#   mpi N CMD...        mpirun -np N CMD..., on shared memory, killed after
#                       DP_MPI_TIMEOUT seconds (120) so a hang fails a test
#   rank_pid MPIRUN R   the pid of rank R of the job of mpirun MPIRUN

# Shared memory only (no network probing), no binding (two cores shared
# with other jobs), and more ranks than cores when a test asks.  The same
# settings are exported for a plain mpirun (a man page's examples, the
# examples/ scripts): bound, rank R of -np 2 may run only on core R, and
# waits whenever another job keeps that core busy, however idle the other.
MPI_OPTS=(--mca btl self,vader --bind-to none)
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_hwloc_base_binding_policy=none
# The sanitizer options for Open MPI are set by tests/lib.sh.

have_mpirun() { command -v mpirun >/dev/null 2>&1; }

mpi() {
	local n=$1
	shift
	timeout "${DP_MPI_TIMEOUT:-120}" mpirun "${MPI_OPTS[@]}" -np "$n" "$@"
}

rank_pid() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(awk '{print $4}' "$p/stat" 2>/dev/null)" = "$1" ] || continue
		if tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
			echo "${p#/proc/}"
			return 0
		fi
	done
	return 1
}
