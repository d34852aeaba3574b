"""bench/tcp_duplex.py - plain TCP both ways at once between two emulated hosts
(bench/ring-pair.sh): the link's own duplex rate, without MPI.
  tcp_duplex.py server PORT NSOCK
  tcp_duplex.py client ADDR PORT NSOCK MIB
NSOCK 1: one socket carries both directions (as Open MPI's one socket a
pair); 2: a socket a direction.  The client prints seconds and Gbit/s a
direction for MIB each way."""
import socket, sys, threading, time
def pump_send(s, n):
    b = bytearray(1 << 20); left = n
    while left > 0:
        k = s.send(memoryview(b)[:min(left, len(b))]); left -= k
def pump_recv(s, n):
    b = bytearray(1 << 20); left = n
    while left > 0:
        k = s.recv_into(b, min(left, len(b)))
        if k == 0: raise SystemExit("eof")
        left -= k
def run(socks, n, sendon, recvon):
    th = [threading.Thread(target=pump_send, args=(socks[sendon], n)), threading.Thread(target=pump_recv, args=(socks[recvon], n))]
    t = time.time(); [x.start() for x in th]; [x.join() for x in th]; return time.time() - t
if sys.argv[1] == 'server':
    port, ns = int(sys.argv[2]), int(sys.argv[3])
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(('', port)); l.listen(4)
    socks = [l.accept()[0] for i in range(ns)]
    n = int.from_bytes(socks[0].recv(8), 'little')
    run(socks, n, 0, ns - 1)  # one socket: same; two: send on 0 recv on 1
    time.sleep(0.5)
else:
    addr, port, ns, mb = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    socks = []
    for i in range(ns):
        s = socket.socket(); s.connect((addr, port)); socks.append(s)
    n = int(mb * 1048576)
    socks[0].send(n.to_bytes(8, 'little')); time.sleep(0.2)
    dt = run(socks, n, ns - 1, 0)
    print(f"nsock={ns} mb={mb} each way sec={dt:.3f} gbit_per_dir={n*8/dt/1e9:.3f}")
