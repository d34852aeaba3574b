#!/usr/bin/python3
"""tests/s3-faults.py - a fault-injecting reverse proxy in front of an S3 server.

    s3-faults.py --upstream http://127.0.0.1:PORT --port-file F [faults] [--log FILE]

Listens on 127.0.0.1 (a free port, written to --port-file) and forwards
every request unchanged (path, query and headers byte for byte, so SigV4
signatures still hold) to the upstream server, injecting faults:

  --drop-get N      every Nth GET that returns a body: send the status, the
                    headers and half the body, then drop the connection
  --stall-get N     every Nth GET that returns a body: send half the body, then
                    nothing for 30 s (a stalled transfer) before dropping it
  --reset N         every Nth request: close the connection without answering
  --slowdown N      every Nth request: answer 503 SlowDown without forwarding
  --fail-parts      answer every UploadPart (PUT ?partNumber=) with 500
                    InternalError, so a multipart upload can never finish
  --corrupt-get N   every Nth GET that returns a body: flip one bit in the
                    middle of it (what a checksum must catch)
  --rate BYTES      send bodies at most this fast (bytes a second) on each
                    connection: a store whose connections are slow
  --list-size TEXT  in every ListObjectsV2 answer, write each <Size> as TEXT
                    (a crafted listing: "-5", "1e3", "")
  --bucket-region R buckets that live in region R: a request signed for
                    another region is answered 301 PermanentRedirect with
                    x-amz-bucket-region: R (--region-400: 400
                    AuthorizationHeaderMalformed with <Region>R</Region>);
                    BUCKET=R: only that bucket (path-style), repeatable
  --refuse-delete S a DeleteObjects answer also reports, as refused with
                    AccessDenied, every key of the request that contains S
                    (the objects are deleted all the same)
  --list-loop MODE  a ListObjectsV2 answer says it is truncated, its next token
                    "LOOP"; a request with that token is answered, not forwarded,
                    with the first page again: its keys too (MODE keys) or
                    without them (MODE token): a server that repeats itself
  --uploads-loop    a ListMultipartUploads answer says it is truncated, its next
                    markers "LOOP" and "LOOPID"; a request from those markers is
                    answered, not forwarded, with the same page: markers that do
                    not go forward
  --list-nul        in every ListObjectsV2 answer, the first <Key> gets "%00"
                    (a url-encoded NUL) in front
  --delay SECONDS   hold every request this long before forwarding it, and
                    log "inflight N" lines: how many requests were held at
                    once (what runs in parallel)

Counters are global over all connections.  Each request is logged as one
line "METHOD TARGET FAULT" to --log.  Python standard library only.
"""
import argparse
import http.client
import http.server
import socket
import threading
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te",
       "upgrade"}


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.inflight = 0
        self.page = None  # --list-loop: the page answered again
        self.n = 0
        self.gets = 0
        up = urllib.parse.urlsplit(args.upstream)
        self.host, self.port = up.hostname, up.port or 80
        self.log = open(args.log, "a", buffering=1) if args.log else None

    def note(self, line):
        if self.log:
            with self.lock:
                self.log.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, fmt, *a):  # quiet
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _answer(self, status, body, ctype="application/xml"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self):
        st = self.state
        a = st.args
        body = self._body()
        with st.lock:
            st.n += 1
            n = st.n
        target = self.path
        if a.reset and n % a.reset == 0:
            st.note("%s %s reset" % (self.command, target))
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            self.connection.close()
            return
        if a.slowdown and n % a.slowdown == 0:
            st.note("%s %s slowdown" % (self.command, target))
            self._answer(503, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown'
                         b'</Code><Message>Please reduce your request rate.</Message></Error>')
            return
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query, keep_blank_values=True)
        region = None
        for br in a.bucket_region or []:
            b, _, r = br.rpartition("=")
            if not b or urllib.parse.urlsplit(target).path.split("/")[1] == b:
                region = r
        if region:
            import re
            m = re.search(r"Credential=[^/]+/[0-9]+/([^/]+)/", self.headers.get("Authorization", ""))
            if m and m.group(1) != region:
                st.note("%s %s region %s" % (self.command, target, m.group(1)))
                if a.region_400:
                    self.send_response(400)
                    if self.command == "HEAD":  # no body: S3 names the region in a header
                        self.send_header("x-amz-bucket-region", region)
                    body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
                            b'AuthorizationHeaderMalformed</Code><Message>the region \'' +
                            m.group(1).encode() + b'\' is wrong; expecting \'' +
                            region.encode() + b'\'</Message><Region>' +
                            region.encode() + b'</Region></Error>')
                else:
                    self.send_response(301)
                    self.send_header("x-amz-bucket-region", region)
                    body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PermanentRedirect'
                            b'</Code><Message>The bucket you are attempting to access must be '
                            b'addressed using the specified endpoint.</Message></Error>')
                if self.command == "HEAD":
                    body = b""
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
        if a.uploads_loop and "uploads" in q and q.get("key-marker") == ["LOOP"] and \
                st.page is not None:
            st.note("%s %s loop" % (self.command, target))
            self._answer(200, st.page)
            return
        if a.list_loop and q.get("continuation-token") == ["LOOP"] and st.page is not None:
            st.note("%s %s loop" % (self.command, target))
            self._answer(200, st.page)
            return
        if a.fail_parts and self.command == "PUT" and "partNumber" in q:
            st.note("%s %s fail" % (self.command, target))
            self._answer(500, b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError'
                         b'</Code><Message>injected failure</Message></Error>')
            return
        if a.delay:
            import time
            with st.lock:
                st.inflight += 1
                now = st.inflight
            st.note("inflight %d" % now)
            time.sleep(a.delay)
            with st.lock:
                st.inflight -= 1
        conn = http.client.HTTPConnection(st.host, st.port, timeout=60)
        conn.putrequest(self.command, target, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() not in HOP and k.lower() != "content-length":
                conn.putheader(k, v)
        if body or self.command in ("PUT", "POST"):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read() if self.command != "HEAD" else b""
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
        conn.close()
        if a.list_size is not None and self.command == "GET" and "list-type" in q and \
                resp.status == 200:
            import re
            data = re.sub(rb"<Size>[^<]*</Size>",
                          b"<Size>" + a.list_size.encode() + b"</Size>", data)
        if (a.list_loop or a.list_nul) and self.command == "GET" and "list-type" in q and \
                resp.status == 200:
            import re
            if a.list_nul:
                data = data.replace(b"<Key>", b"<Key>%00", 1)
            if a.list_loop:
                data = re.sub(rb"<IsTruncated>[^<]*</IsTruncated>", b"<IsTruncated>true</IsTruncated>",
                              data)
                data = re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", data)
                data = data.replace(b"</ListBucketResult>",
                                    b"<NextContinuationToken>LOOP</NextContinuationToken>"
                                    b"</ListBucketResult>")
                st.page = data if a.list_loop == "keys" else \
                    re.sub(rb"<Contents>.*?</Contents>", b"", data, flags=re.S)
        if a.uploads_loop and self.command == "GET" and "uploads" in q and resp.status == 200:
            import re
            data = re.sub(rb"<IsTruncated>[^<]*</IsTruncated>", b"<IsTruncated>true</IsTruncated>", data)
            data = re.sub(rb"<Next(KeyMarker|UploadIdMarker)>[^<]*</Next(KeyMarker|UploadIdMarker)>|"
                          rb"<Next(KeyMarker|UploadIdMarker)/>", b"", data)
            data = data.replace(b"</ListMultipartUploadsResult>",
                                b"<NextKeyMarker>LOOP</NextKeyMarker><NextUploadIdMarker>LOOPID"
                                b"</NextUploadIdMarker></ListMultipartUploadsResult>")
            st.page = data
        if a.refuse_delete and self.command == "POST" and "delete" in q and resp.status == 200:
            import re
            keys = [k for k in re.findall(rb"<Key>(.*?)</Key>", body)
                    if a.refuse_delete.encode() in k]
            errs = b"".join(b"<Error><Key>" + k + b"</Key><Code>AccessDenied</Code>"
                            b"<Message>Access Denied</Message></Error>" for k in keys)
            if b"</DeleteResult>" in data:
                data = data.replace(b"</DeleteResult>", errs + b"</DeleteResult>")
            else:  # <DeleteResult .../>: nothing refused, nothing listed
                data = re.sub(rb"<DeleteResult([^>]*)/>", rb"<DeleteResult\1>" + errs +
                              b"</DeleteResult>", data)
        drop = stall = corrupt = False
        if (a.drop_get or a.stall_get or a.corrupt_get) and self.command == "GET" and len(data) >= 2:
            with st.lock:
                st.gets += 1
                drop = a.drop_get and st.gets % a.drop_get == 0
                stall = not drop and a.stall_get and st.gets % a.stall_get == 0
                corrupt = not drop and not stall and a.corrupt_get and \
                    st.gets % a.corrupt_get == 0
        if corrupt:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0x10]) + data[mid + 1:]
        st.note("%s %s %s" % (self.command, target,
                              "drop" if drop else "stall" if stall else
                              "corrupt" if corrupt else resp.status))
        self.send_response(resp.status, resp.reason)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if drop or stall:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if stall:
                import time
                time.sleep(30)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if a.rate and data:
            import time
            t0, step = time.monotonic(), max(1, a.rate // 50)
            for i in range(0, len(data), step):
                self.wfile.write(data[i:i + step])
                ahead = (i + step) / a.rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            return
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--drop-get", type=int, default=0)
    p.add_argument("--stall-get", type=int, default=0)
    p.add_argument("--reset", type=int, default=0)
    p.add_argument("--slowdown", type=int, default=0)
    p.add_argument("--fail-parts", action="store_true")
    p.add_argument("--corrupt-get", type=int, default=0)
    p.add_argument("--rate", type=int, default=0)
    p.add_argument("--list-size")
    p.add_argument("--bucket-region", action="append")
    p.add_argument("--refuse-delete")
    p.add_argument("--delay", type=float, default=0)
    p.add_argument("--list-loop", choices=("keys", "token"))
    p.add_argument("--list-nul", action="store_true")
    p.add_argument("--uploads-loop", action="store_true")
    p.add_argument("--region-400", action="store_true")
    p.add_argument("--log")
    a = p.parse_args()
    Handler.state = State(a)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    import os
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
