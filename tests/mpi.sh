# tests/mpi.sh - helpers of the tests that run a real mpirun (Open MPI).
# Source after tests/lib.sh.
#
#   mpi N CMD...        mpirun -np N CMD..., on shared memory, killed after
#                       DP_MPI_TIMEOUT seconds (120) so a hang fails a test
#   rank_pid MPIRUN R   the pid of rank R of the job of mpirun MPIRUN

# Shared memory only (no network probing), no binding (two cores shared
# with other jobs), and more ranks than cores when a test asks.
MPI_OPTS=(--mca btl self,vader --bind-to none)
export OMPI_MCA_rmaps_base_oversubscribe=1
# A build with AddressSanitizer (make asan): Open MPI does not free all it
# allocates at MPI_Finalize, and frees some from components it has already
# unloaded; full stacks let the suppressions find the library.
export LSAN_OPTIONS="suppressions=$DP_SRC/tests/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

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
