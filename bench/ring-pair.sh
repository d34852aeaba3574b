#!/bin/bash
# bench/ring-pair.sh - why a ring of 2 hosts could carry half the link
# (issue 16; bench/REPORT), on 2 hosts of tests/cluster.sh at 1 Gbit/s:
#   - plain TCP both ways at once (bench/tcp_duplex.py): one socket for
#     both directions against a socket a direction: the link's duplex rate;
#   - the 32 MiB fp32 ring allreduce (bench/allreduce.c) with Open MPI's
#     defaults against a TCP eager limit of 512 KiB (no rendezvous), and
#     against its own 100 ms queue (CL_QUEUE), alternated RP_REPS times (3):
#     equal where the ring's messages go eagerly (lib/train/comm/mpi.c);
#   - the h1-h2 socket's unsent bytes on each side (ss -tin) during a
#     run: both at once when the link carries both directions, one side
#     at a time when the ring waits on rendezvous answers.
# Needs root (network namespaces); says why and exits 0 where it cannot.
cd "$(dirname "$0")/.."
BH_NAME=ring-pair BH_N=2
. bench/hosts.bash
cluster_shape 1gbit || exit 1
for ns in 1 2 1 2; do
	ip netns exec "$CL_ID-h2" timeout 60 $PY bench/tcp_duplex.py server 5001 $ns &
	sleep 0.5
	echo "tcp $(ip netns exec "$CL_ID-h1" timeout 60 $PY bench/tcp_duplex.py client "$CL_NET.2" 5001 $ns 64)"
	wait
done
ring() { # label [MCA...]
	local l=$1
	shift
	echo "ring $l $(cluster_mpirun "$@" -np 2 -H h1,h2 "$T/allreduce" 32 8 fp32 ring 2>&1 |
		grep -o 'sec=.*busbw_gbit=[0-9.]*')"
}
for rep in $(seq "${RP_REPS:-3}"); do
	ring defaults
	ring eager_limit=512KiB --mca btl_tcp_eager_limit 524288
	CL_QUEUE=100ms cluster_shape 1gbit && ring queue=100ms
	cluster_shape 1gbit
done
cluster_mpirun -np 2 -H h1,h2 "$T/allreduce" 32 40 fp32 ring >/dev/null 2>&1 &
sleep 4
for k in 1 2 3 4 5 6; do
	u1=$(ip netns exec "$CL_ID-h1" ss -tin "( dport >= :1024 and dst $CL_NET.2 )" | grep -o 'notsent:[0-9]*')
	u2=$(ip netns exec "$CL_ID-h2" ss -tin "( dport >= :1024 and dst $CL_NET.1 )" | grep -o 'notsent:[0-9]*')
	echo "ss look $k: h1->h2 ${u1:-notsent:0}  h2->h1 ${u2:-notsent:0}"
	sleep 0.13
done
wait
