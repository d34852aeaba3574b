# tests/cluster.sh - several "hosts" on this machine, for tests and bench/
# of jobs that span hosts.  Source after tests/lib.sh (and tests/mpi.sh).
#
#   cluster_skip_reason     why no cluster can be made here (empty: it can)
#   cluster_start N         hosts h1..hN and a login host c, each a network
#                           namespace dpt-<pid>-<name> with one interface
#                           eth0 (10.99.<pid % 250>.k/24), joined by a bridge
#                           in a namespace of its own (dpt-<pid>-br); the
#                           machine's own interfaces, routes and firewall are
#                           never touched, and the addresses exist only in
#                           those namespaces
#   cluster_shape RATE      a token bucket (tc tbf, RATE as tc writes it:
#                           1gbit, 100mbit) on every host's eth0 (its NIC)
#                           and on the bridge's port toward it (a switch
#                           port; CL_SHAPE_PORTS=0: not there): each
#                           direction of each link carries at most RATE
#                           in a queue of its own, as on a full-duplex
#                           switched link, of $CL_QUEUE (default 5ms: 625
#                           KB at 1 Gbit/s, a switch port's buffer)
#   cluster_mpirun ARGS...  mpirun on host c with Open MPI's daemons started
#                           on the hosts of -H by the agent below, TCP
#                           between them (btl tcp,self, or $CL_BTL such as
#                           tcp,vader,self; oob and btl only on
#                           the cluster's subnet), killed after
#                           DP_MPI_TIMEOUT seconds (120)
#   cluster_pids H [COMM]   the processes on host H (named COMM)
#   cluster_wait_idle       wait (10 s at most) until the hosts run nothing
#   cluster_stop            kill what runs on the hosts, remove the
#                           namespaces (also run at exit, failed or not)
#
# A host's own disk: $CL_LOCAL is a directory that each host sees as a
# tmpfs of its own (a mount namespace per host), filled when its daemon
# starts from $CL_HOSTS/H/ and copied back there when it ends, as a job
# script would copy to and from a node's local disk.  A path under
# $CL_LOCAL that exists on h1 does not exist on h2.  Everything else (the
# test's $T) is shared, as a network file system would be.
#
# The agent (plm_rsh_agent) runs `ip netns exec` where ssh would connect,
# with the host's name as its hostname (a UTS namespace), and keeps the
# daemon in the foreground (no --daemonize) so that the copy back
# happens when it ends, and a daemon that dies is noticed by mpirun both
# ways: its TCP connection and its agent.
#
# Latency: the kernel of the test machines has no netem, so a delay per
# packet cannot be added: a link here has a veth pair's latency (a few
# microseconds) and tbf's rate; tbf's "latency" is only how long a packet
# may wait in its queue before it is dropped.  What a 1 Gbit/s or 10
# Gbit/s link does to bandwidth-bound traffic is emulated; what a 50 us
# switch hop or a WAN does to latency-bound traffic is not.

CL_SUBNET="10.99.$(($$ % 250)).0/24"
CL_NET="10.99.$(($$ % 250))"
CL_ID="dpt-$$"
CL_HOSTS=
CL_LOCAL=
CL_N=0

cluster_skip_reason() {
	[ "$(id -u)" = 0 ] || { echo "network namespaces need root"; return; }
	command -v ip >/dev/null 2>&1 || { echo "no ip (apt-get install iproute2)"; return; }
	command -v unshare >/dev/null 2>&1 || { echo "no unshare (util-linux)"; return; }
	command -v mpirun >/dev/null 2>&1 || { echo "no mpirun (apt-get install openmpi-bin)"; return; }
	if ! ip netns add "$CL_ID-probe" 2>/dev/null; then
		echo "ip netns add fails here (no CAP_SYS_ADMIN in this container?)"
		return
	fi
	local why=
	ip -n "$CL_ID-probe" link add v0 type veth peer name v1 2>/dev/null ||
		why="no veth pairs in this kernel"
	[ -z "$why" ] && { ip -n "$CL_ID-probe" link add b0 type bridge 2>/dev/null ||
		why="no bridges in this kernel"; }
	ip netns del "$CL_ID-probe"
	echo "$why"
}

cluster_start() {
	local n=$1 h i
	CL_N=$n
	CL_HOSTS="$T/cluster-hosts"
	CL_LOCAL="$T/local"
	mkdir -p "$CL_LOCAL" "$T/cluster"
	trap 'cluster_stop; _tap_cleanup' EXIT
	trap 'exit 130' INT TERM
	ip netns add "$CL_ID-br" || return 1
	ip -n "$CL_ID-br" link add br0 type bridge || return 1
	ip -n "$CL_ID-br" link set br0 up
	for i in $(seq 0 "$n"); do
		if [ "$i" = 0 ]; then h=c; else h=h$i; fi
		mkdir -p "$CL_HOSTS/$h"
		ip netns add "$CL_ID-$h" || return 1
		# both ends made inside the namespaces: nothing appears in the machine's own
		ip -n "$CL_ID-br" link add "v-$h" type veth peer name eth0 netns "$CL_ID-$h" || return 1
		ip -n "$CL_ID-br" link set "v-$h" master br0 up
		ip -n "$CL_ID-$h" link set lo up
		ip -n "$CL_ID-$h" link set eth0 up
		ip -n "$CL_ID-$h" addr add "$CL_NET.$([ "$i" = 0 ] && echo 254 || echo "$i")/24" dev eth0
	done
	# a host's own TMPDIR (under $T): a daemon that is killed leaves its
	# session directory behind
	cat > "$T/cluster/agent" <<EOF
#!/bin/sh
# plm_rsh_agent of tests/cluster.sh: agent [OPTIONS] HOST COMMAND...
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1
shift
cmd=\$(printf '%s' "\$*" | sed 's/ --daemonize / /')
exec ip netns exec "$CL_ID-\$host" unshare --uts --mount --propagation private sh -c '
hostname "\$0" || exit 1
export TMPDIR="$CL_HOSTS/\$0.tmp"
mkdir -p "\$TMPDIR" || exit 1
mount -t tmpfs -o size=256m dpt-local "$CL_LOCAL" || exit 1
cp -a "$CL_HOSTS/\$0/." "$CL_LOCAL/" || exit 1
sh -c "\$1"
rc=\$?
cp -a "$CL_LOCAL/." "$CL_HOSTS/\$0/"
exit \$rc' "\$host" "\$cmd"
EOF
	chmod +x "$T/cluster/agent"
}

cluster_shape() {
	local h
	for h in c $(seq -f 'h%g' 1 "$CL_N"); do
		# the host's NIC (host -> switch) and the switch's port toward
		# the host (switch -> host): a queue for each direction
		tc -n "$CL_ID-$h" qdisc replace dev eth0 root tbf rate "$1" burst 256kb \
			latency "${CL_QUEUE:-5ms}" ||
			return 1
		if [ "${CL_SHAPE_PORTS:-1}" = 0 ]; then
			tc -n "$CL_ID-br" qdisc del dev "v-$h" root 2>/dev/null || true
		else
			tc -n "$CL_ID-br" qdisc replace dev "v-$h" root tbf rate "$1" burst 256kb \
				latency "${CL_QUEUE:-5ms}" || return 1
		fi
	done
}

cluster_mpirun() {
	ip netns exec "$CL_ID-c" timeout "${DP_MPI_TIMEOUT:-120}" mpirun \
		--mca plm_rsh_agent "$T/cluster/agent" --mca plm_rsh_no_tree_spawn 1 \
		--mca btl "${CL_BTL:-tcp,self}" --mca btl_tcp_if_include "$CL_SUBNET" \
		--mca oob_tcp_if_include "$CL_SUBNET" --bind-to none "$@"
}

cluster_pids() {
	local p
	for p in $(ip netns pids "$CL_ID-$1" 2>/dev/null); do
		[ -z "${2:-}" ] || [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && echo "$p"
	done
}

cluster_wait_idle() {
	local i h busy
	for i in $(seq 100); do
		busy=
		for h in c $(seq -f 'h%g' 1 "$CL_N"); do
			[ -n "$(ip netns pids "$CL_ID-$h" 2>/dev/null)" ] && busy=1
		done
		[ -z "$busy" ] && return 0
		sleep 0.1
	done
	return 1
}

cluster_stop() {
	local ns p
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$CL_ID-"); do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
	return 0
}
