#!/usr/bin/python3
# tests/creds-server.py - the cloud's credential endpoints, on 127.0.0.1, for
# tests/s3-pipe-creds.t: one HTTP server that answers as
#
#   STS          POST / (or GET /?...) Action=AssumeRoleWithWebIdentity: checks
#                RoleArn and WebIdentityToken, answers AssumeRoleWithWebIdentityResponse
#                XML (an ErrorResponse for a wrong token)
#   container    GET /container/...: checks the Authorization header (--auth),
#                answers {AccessKeyId, SecretAccessKey, Token, Expiration}
#   IMDS         PUT /latest/api/token (needs X-aws-ec2-metadata-token-ttl-seconds),
#                GET /latest/meta-data/iam/security-credentials/[ROLE] and
#                /latest/meta-data/placement/region (need the token: 401 without)
#
# The keys it hands out: --key ID:SECRET (all providers), or with --rotate UID
# fresh ones of radosgw user UID (radosgw-admin -c --rgw-conf) every --every
# seconds, each valid --lifetime seconds and removed from radosgw --grace
# seconds after it expired: a client that does not refresh in time is refused.
# --fail-container N answers the container path with HTTP N.  Every request
# is a line in --log ("METHOD PATH key=ID" or "... refused=WHY"); the port
# goes to --port-file once it listens.
import argparse
import datetime
import http.server
import json
import os
import secrets
import subprocess
import threading
import time
import urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--port-file", required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--key", default="CREDSKEY0000000000:credssecret")
ap.add_argument("--role-arn", default="arn:aws:iam::123456789012:role/dp")
ap.add_argument("--web-token", default="jwt.web.token")
ap.add_argument("--auth", default=None)
ap.add_argument("--fail-container", type=int, default=0)
ap.add_argument("--region", default="eu-west-3")
ap.add_argument("--lifetime", type=float, default=3600)
ap.add_argument("--rotate", default=None)
ap.add_argument("--rgw-conf", default=None)
ap.add_argument("--every", type=float, default=4)
ap.add_argument("--grace", type=float, default=8)
args = ap.parse_args()

lock = threading.Lock()
keys = []  # [id, secret, expires (epoch s)], newest last
imds_tokens = set()
stop = threading.Event()


def log(line):
    with lock, open(args.log, "a") as f:
        f.write(line + "\n")


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def admin(*a):
    return subprocess.run(["radosgw-admin", "-c", args.rgw_conf, *a], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=120).returncode == 0


def rotate_once(n):
    kid = "ROT%017d" % n
    sec = secrets.token_hex(20)
    if admin("key", "create", "--uid", args.rotate, "--key-type", "s3", "--access-key", kid,
             "--secret-key", sec):
        with lock:
            keys.append([kid, sec, time.time() + args.lifetime])
        log("rotate created=%s" % kid)
    now = time.time()
    with lock:
        old = [k for k in keys[:-1] if k[2] + args.grace < now]
    for k in old:
        if admin("key", "rm", "--uid", args.rotate, "--key-type", "s3", "--access-key", k[0]):
            with lock:
                keys.remove(k)
            log("rotate removed=%s" % k[0])


def rotator():
    n = 0
    while not stop.wait(args.every):
        n += 1
        rotate_once(n)


def current():
    with lock:
        if args.rotate:
            k = keys[-1]
            return k[0], k[1], k[2]
    kid, sec = args.key.split(":", 1)
    return kid, sec, time.time() + args.lifetime


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body, ctype="application/json"):
        b = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def refuse(self, status, why):
        log("%s %s refused=%s" % (self.command, self.path, why))
        self.answer(status, why, "text/plain")

    def creds_json(self, token_key="Token", extra=None):
        kid, sec, exp = current()
        d = {"AccessKeyId": kid, "SecretAccessKey": sec, token_key: "", "Expiration": iso(exp)}
        d.update(extra or {})
        log("%s %s key=%s" % (self.command, self.path.split("?")[0], kid))
        return json.dumps(d)

    def sts(self, form):
        if form.get("Action") != ["AssumeRoleWithWebIdentity"]:
            return self.refuse(400, "not AssumeRoleWithWebIdentity")
        if "Authorization" in self.headers:
            return self.refuse(400, "signed (AssumeRoleWithWebIdentity is not)")
        if form.get("WebIdentityToken") != [args.web_token] or form.get("RoleArn") != [args.role_arn]:
            log("%s %s refused=token" % (self.command, self.path))
            return self.answer(400, "<ErrorResponse><Error><Type>Sender</Type>"
                               "<Code>InvalidIdentityToken</Code><Message>Incorrect token "
                               "audience</Message></Error><RequestId>x</RequestId></ErrorResponse>",
                               "text/xml")
        kid, sec, exp = current()
        log("%s / key=%s session=%s" % (self.command, kid, form.get("RoleSessionName", [""])[0]))
        self.answer(200, "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/"
                    "2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials>"
                    "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>"
                    "<SessionToken></SessionToken><Expiration>%s</Expiration></Credentials>"
                    "</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>x</RequestId>"
                    "</ResponseMetadata></AssumeRoleWithWebIdentityResponse>"
                    % (kid, sec, iso(exp)), "text/xml")

    def imds_ok(self):
        t = self.headers.get("X-aws-ec2-metadata-token")
        if t not in imds_tokens:
            self.refuse(401, "no IMDSv2 token")
            return False
        return True

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        if u.path == "/" and u.query:
            return self.sts(urllib.parse.parse_qs(u.query))
        if u.path.startswith("/container/"):
            if args.auth is not None and self.headers.get("Authorization") != args.auth:
                return self.refuse(401, "Authorization")
            if args.fail_container:
                return self.refuse(args.fail_container, "asked to fail")
            return self.answer(200, self.creds_json())
        if u.path == "/latest/meta-data/iam/security-credentials/":
            if self.imds_ok():
                log("GET %s role" % u.path)
                self.answer(200, "dp-role", "text/plain")
            return
        if u.path == "/latest/meta-data/iam/security-credentials/dp-role":
            if self.imds_ok():
                self.answer(200, self.creds_json(extra={"Code": "Success", "Type": "AWS-HMAC"}))
            return
        if u.path == "/latest/meta-data/placement/region":
            if self.imds_ok():
                log("GET %s region=%s" % (u.path, args.region))
                self.answer(200, args.region, "text/plain")
            return
        self.refuse(404, "no such path")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode()
        if self.path == "/":
            return self.sts(urllib.parse.parse_qs(body))
        self.refuse(404, "no such path")

    def do_PUT(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        if self.path != "/latest/api/token":
            return self.refuse(404, "no such path")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if not ttl or not ttl.isdigit():
            return self.refuse(400, "no X-aws-ec2-metadata-token-ttl-seconds")
        t = secrets.token_urlsafe(24)
        with lock:
            imds_tokens.add(t)
        log("PUT /latest/api/token ttl=%s" % ttl)
        self.answer(200, t, "text/plain")


if args.rotate:
    rotate_once(0)
    threading.Thread(target=rotator, daemon=True).start()
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(args.port_file + ".tmp", args.port_file)
try:
    srv.serve_forever()
finally:
    stop.set()
