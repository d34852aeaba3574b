#!/usr/bin/python3
# tests/creds-botocore.py - which credentials botocore (Debian's
# python3-botocore) finds in this environment, as one line:
#   provider=METHOD key_id=ID      (METHOD as botocore names it: env, iam-role...)
#   provider=none                  (none found)
#   error=CLASS                    (botocore refused the configuration)
# for tests/s3-pipe-creds.t to compare with `s3-pipe whoami`.  Never prints
# a secret.  botocore before 1.31 has no AWS_ENDPOINT_URL_STS: its STS
# client is pointed there as newer ones do by themselves.
import os
import sys

import botocore.session

s = botocore.session.Session()
sts = os.environ.get("AWS_ENDPOINT_URL_STS")
if sts:
    create = s.create_client

    def create_client(name, *a, **kw):
        if name == "sts":
            kw.setdefault("endpoint_url", sts)
        return create(name, *a, **kw)

    s.create_client = create_client
try:
    c = s.get_credentials()
    if c is None:
        print("provider=none")
    else:
        f = c.get_frozen_credentials()
        print("provider=%s key_id=%s" % (c.method, f.access_key))
except Exception as e:  # noqa: BLE001 - the class is the answer
    print("error=%s" % type(e).__name__)
    sys.exit(0)
