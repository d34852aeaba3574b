#!/bin/bash
# s3-pipe's credentials from the cloud's providers, against local stand-ins
# (tests/creds-server.py on 127.0.0.1: STS AssumeRoleWithWebIdentity, the
# container credentials endpoint, the EC2 instance metadata service v2) and
# a credential_process script: each hands out radosgw's keys, and a put and
# a get against radosgw succeed with them.  The chain's choice is compared
# with botocore's (Debian's python3-botocore, tests/creds-botocore.py) for
# the same environments.  Temporary credentials that expire in seconds,
# with the endpoint handing out fresh radosgw keys and removing the expired
# ones from radosgw, keep a slow put and a slow get working.
. "${DP_SRC:-.}/tests/lib.sh"
. "$DP_SRC/tests/s3lib.sh"
s3_setup creds

SERVERS=()
_creds_cleanup() {
	local p
	for p in "${SERVERS[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	_s3_cleanup
}
trap _creds_cleanup EXIT

# server NAME ARGS...: tests/creds-server.py, its URL in $URL_NAME, its log $T/NAME.log
server() {
	local name=$1 i
	shift
	: >"$T/$name.log"
	$PY "$DP_SRC/tests/creds-server.py" --port-file "$T/$name.port" --log "$T/$name.log" "$@" \
		</dev/null >/dev/null 2>"$T/$name.err" &
	SERVERS+=($!)
	for i in $(seq 1 1200); do # bounded: a server that never starts
		[ -s "$T/$name.port" ] && break
		kill -0 "$!" 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$T/$name.port" ] || diag "creds-server $name did not start: $(cat "$T/$name.err")"
	printf -v "URL_$name" 'http://127.0.0.1:%s' "$(cat "$T/$name.port" 2>/dev/null)"
}

# c CMD...: CMD with no credentials from the environment, s3lib's endpoint
# and region kept; the providers' settings come as NAME=VALUE before CMD
c() {
	env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
		AWS_CONFIG_FILE="$T/none" AWS_SHARED_CREDENTIALS_FILE="$T/none" "$@"
}

ROLE=arn:aws:iam::123456789012:role/dp
printf 'jwt.web.token' >jwt
printf 'jwt.wrong' >jwt.bad
printf 'Bearer file-token' >auth.file
server real --key "$RGW_KEY:$RGW_SECRET" --auth "Bearer file-token" --region eu-west-3
head -c 7000000 /dev/urandom >data.bin

# roundtrip NAME ENV...: put and get with the credentials of ENV
roundtrip() {
	local name=$1
	shift
	c "$@" s3-pipe put --part-size 5M "s3://creds/$name.bin" <data.bin 2>"$name.err"
	is "$?" 0 "$name: put (multipart) with its credentials"
	c "$@" s3-pipe get "s3://creds/$name.bin" >"$name.got" 2>>"$name.err"
	same_file "$name.got" data.bin "$name: get reads it back"
	unlike "$(cat "$name.err")" "$RGW_SECRET" "$name: the secret in no message"
}

# ---- each provider, against radosgw ---------------------------------------------------
roundtrip web AWS_WEB_IDENTITY_TOKEN_FILE="$T/jwt" AWS_ROLE_ARN=$ROLE \
	AWS_ROLE_SESSION_NAME=dp-test AWS_ENDPOINT_URL_STS="$URL_real"
like "$(cat real.log)" "^POST / key=$RGW_KEY session=dp-test" "web identity: one unsigned POST to STS, session name passed"
is "$(grep -c '^POST /' real.log)" 2 "web identity: fetched once a command (put, get)"
: >real.log

roundtrip container AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_real/container/v1" \
	AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE="$T/auth.file" AWS_CONTAINER_AUTHORIZATION_TOKEN=ignored
like "$(cat real.log)" "^GET /container/v1 key=$RGW_KEY" "container: the endpoint with the token file's Authorization"
unlike "$(cat real.log)" "refused" "container: no request refused"
: >real.log
c AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_real/container/v1" \
	AWS_CONTAINER_AUTHORIZATION_TOKEN="Bearer file-token" s3-pipe get s3://creds/container.bin >tok.got
same_file tok.got data.bin "container: AWS_CONTAINER_AUTHORIZATION_TOKEN when there is no token file"
: >real.log
mkdir -p many && for i in 1 2 3 4 5 6; do printf 'file %s\n' $i >many/f$i; done
c AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_real/container/v1" AWS_CONTAINER_AUTHORIZATION_TOKEN="Bearer file-token" \
	s3-pipe put -j 3 s3://creds/many/ many
is "$?" 0 "container: a put of six files by three workers"
is "$(grep -c '^GET /container/v1' real.log)" 1 "... that share one fetch of the credentials"

cat >proc.sh <<EOF
#!/bin/sh
# the arguments as given: "\$1" is 'a b'
[ "\$1" = "a b" ] || { echo "bad arguments: \$*" >&2; exit 9; }
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "Expiration": "2099-01-01T00:00:00Z"}' \\
	"$RGW_KEY" "$RGW_SECRET"
EOF
chmod +x proc.sh
printf '[default]\ncredential_process = %s "a b"\n' "$T/proc.sh" >proc.config
roundtrip process AWS_CONFIG_FILE="$T/proc.config"

roundtrip imds AWS_EC2_METADATA_DISABLED=false AWS_EC2_METADATA_SERVICE_ENDPOINT="$URL_real/"
like "$(cat real.log)" "PUT /latest/api/token ttl=21600" "IMDS: a session token first (IMDSv2)"
unlike "$(cat real.log)" "refused" "IMDS: every request carried it"
like "$(cat real.log)" "GET /latest/meta-data/iam/security-credentials/dp-role key=$RGW_KEY" "IMDS: the role's credentials"
unlike "$(cat real.log)" "placement/region" "IMDS: no region asked for when AWS_REGION gives one"
: >real.log
run c AWS_EC2_METADATA_DISABLED=false AWS_REGION= AWS_EC2_METADATA_SERVICE_ENDPOINT="$URL_real" s3-pipe whoami
like "$out" "^provider=iam-role key_id=$RGW_KEY expires=[0-9T:-]+Z profile=default region=eu-west-3 " \
	"IMDS: no region set anywhere: the instance's (placement/region); an endpoint without its /"
run c AWS_EC2_METADATA_DISABLED=false AWS_REGION= AWS_DEFAULT_REGION=ap-south-1 \
	AWS_EC2_METADATA_SERVICE_ENDPOINT="$URL_real" s3-pipe whoami
like "$out" "region=ap-south-1 " "IMDS: AWS_DEFAULT_REGION before the instance's region"

# ---- failures name the provider and what failed --------------------------------------------
server fail --fail-container 500
run c AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_fail/container/x" s3-pipe get s3://creds/web.bin
is "$rc:$err" "4:s3-pipe: credentials: container endpoint $URL_fail/container/x: HTTP 500" \
	"container endpoint answering 500: exit 4, the endpoint and the status"
is "$(grep -c 'refused=asked' fail.log)" 3 "... after three attempts, as botocore"
run c AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_real/container/x" s3-pipe get s3://creds/web.bin
is "$rc:$err" "4:s3-pipe: credentials: container endpoint $URL_real/container/x: HTTP 401" \
	"container endpoint without the Authorization it wants: HTTP 401"
run c AWS_CONTAINER_CREDENTIALS_FULL_URI="http://10.1.2.3/creds" s3-pipe get s3://creds/web.bin
like "$rc:$err" "^4:s3-pipe: credentials: container endpoint http://10.1.2.3/creds: not https, nor http to a loopback address" \
	"container endpoint on a host not allowed (as botocore): refused before any request"
run c AWS_WEB_IDENTITY_TOKEN_FILE="$T/jwt.bad" AWS_ROLE_ARN=$ROLE AWS_ENDPOINT_URL_STS="$URL_real" \
	s3-pipe get s3://creds/web.bin
is "$rc:$err" "4:s3-pipe: credentials: web identity token $T/jwt.bad (STS $URL_real): InvalidIdentityToken: Incorrect token audience" \
	"STS refusing the token: its code and message"
run c AWS_WEB_IDENTITY_TOKEN_FILE="$T/jwt" s3-pipe get s3://creds/web.bin
like "$rc:$err" "^4:s3-pipe: credentials: web identity token $T/jwt: no role ARN" "a token without AWS_ROLE_ARN"
printf '[default]\ncredential_process = /bin/sh -c "echo no MFA device >&2; exit 3"\n' >bad.config
run c AWS_CONFIG_FILE="$T/bad.config" s3-pipe get s3://creds/web.bin
is "$rc:$err" "4:s3-pipe: credentials: credential_process /bin/sh: exit status 3: no MFA device" \
	"credential_process failing: its status and its message"
printf '[default]\ncredential_process = /bin/echo %s\n' "'{\"Version\": 2}'" >v2.config
run c AWS_CONFIG_FILE="$T/v2.config" s3-pipe get s3://creds/web.bin
is "$rc:$err" "4:s3-pipe: credentials: credential_process /bin/echo: the answer: Version is not 1" \
	"credential_process with another Version"
run c AWS_EC2_METADATA_DISABLED=false AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1 \
	s3-pipe get s3://creds/web.bin
like "$rc:$err" "^4:s3-pipe: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile in .*, or use --no-sign-request \\(instance metadata http://127.0.0.1:1/: token: " \
	"nothing anywhere, no instance metadata service: the usual advice, and why IMDS gave none"
run c s3-pipe whoami s3://creds/
is "$rc" 2 "whoami takes no URL: usage"
run c AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_real/container/v1" s3-pipe --no-sign-request whoami
like "$rc:$out" "^0:provider=none key_id=- expires=never " "whoami --no-sign-request: none, nothing fetched"
c s3-pipe get data.bin >local.got
is "$?" 0 "local files: no provider contacted (none here would answer)"

# ---- the chain's choice, compared with botocore's ---------------------------------------------
if ! /usr/bin/python3 -c 'import botocore' 2>/dev/null; then
	skip "python3-botocore not installed (scripts/deps --test): no comparison with botocore"
else
	server fake --key FAKEKEY1234567890AB:fakesecret --auth "Bearer file-token"
	printf '[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = s\n' >both.cred
	printf '[default]\ncredential_process = %s "a b"\naws_access_key_id = CONFKEY\naws_secret_access_key = s\n' \
		"$T/proc.sh" >both.config
	printf '[default]\naws_access_key_id = CONFKEY\naws_secret_access_key = s\n' >conf.config
	printf '[profile wi]\nweb_identity_token_file = %s\nrole_arn = %s\n[profile lone]\nregion = eu-west-1\n' \
		"$T/jwt" "$ROLE" >wi.config
	WEB=(AWS_WEB_IDENTITY_TOKEN_FILE="$T/jwt" AWS_ROLE_ARN=$ROLE AWS_ENDPOINT_URL_STS="$URL_fake")
	CONT=(AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_fake/container/x" AWS_CONTAINER_AUTHORIZATION_TOKEN="Bearer file-token")
	IMDS=(AWS_EC2_METADATA_DISABLED=false AWS_EC2_METADATA_SERVICE_ENDPOINT="$URL_fake/")
	# case NAME WANT ENV...: botocore and s3-pipe whoami agree, on WANT
	case_() {
		local name=$1 want=$2 b s
		shift 2
		b=$(c "$@" /usr/bin/python3 "$DP_SRC/tests/creds-botocore.py" 2>&1)
		s=$(c "$@" s3-pipe whoami 2>/dev/null | sed 's/ expires=.*//')
		[ -n "$s" ] || s=provider=none # whoami fails (4) when there are none
		is "$s" "$b" "$name: s3-pipe chooses as botocore ($b)"
		like "$s" "^provider=$want( |$)" "$name: $want"
	}
	case_ "env first" env "${WEB[@]}" "${CONT[@]}" "${IMDS[@]}" AWS_ACCESS_KEY_ID=ENVKEY AWS_SECRET_ACCESS_KEY=s
	case_ "web identity before the files" assume-role-with-web-identity "${WEB[@]}" "${CONT[@]}" "${IMDS[@]}" \
		AWS_SHARED_CREDENTIALS_FILE="$T/both.cred" AWS_CONFIG_FILE="$T/both.config"
	case_ "credentials file before credential_process" shared-credentials-file "${CONT[@]}" "${IMDS[@]}" \
		AWS_SHARED_CREDENTIALS_FILE="$T/both.cred" AWS_CONFIG_FILE="$T/both.config"
	case_ "credential_process before the config file's keys" custom-process "${CONT[@]}" "${IMDS[@]}" \
		AWS_CONFIG_FILE="$T/both.config"
	case_ "config file before the container" config-file "${CONT[@]}" "${IMDS[@]}" AWS_CONFIG_FILE="$T/conf.config"
	case_ "container before the instance" container-role "${CONT[@]}" "${IMDS[@]}"
	case_ "instance metadata last" iam-role "${IMDS[@]}"
	case_ "a profile's web_identity_token_file" assume-role-with-web-identity AWS_ENDPOINT_URL_STS="$URL_fake" \
		AWS_CONFIG_FILE="$T/wi.config" AWS_PROFILE=wi "${IMDS[@]}"
	case_ "a profile without keys: on to the instance" iam-role AWS_CONFIG_FILE="$T/wi.config" AWS_PROFILE=lone "${IMDS[@]}"
	case_ "nothing at all" none
fi

# ---- refreshed before they expire, during a slow put and a slow get ------------------------------
# radosgw's second user gets a fresh key every 3 s, each valid 12 s and
# removed from radosgw 4 s after it expired; s3-pipe refreshes with 8 s
# left (advisory) and must with 4 s left (mandatory).  The put and the get
# last about 25 s each, longer than a key lives: several keys come and go
# under them.
AWS_ACCESS_KEY_ID=$RGW_KEY2 AWS_SECRET_ACCESS_KEY=$RGW_SECRET2 awsr s3api create-bucket --bucket rot >/dev/null 2>&1
server rot --rotate other --rgw-conf "$RGW_DIR/ceph.conf" --lifetime 12 --every 3 --grace 4
head -c 25000000 /dev/urandom >slow.bin
slow() { # CHUNK: copy stdin to stdout, CHUNK bytes every 0.25 s
	$PY -c 'import sys, time
n = int(sys.argv[1])
while True:
    b = sys.stdin.buffer.read(n)
    if not b:
        break
    sys.stdout.buffer.write(b)
    sys.stdout.buffer.flush()
    time.sleep(0.25)' "$1"
}
ROT=(DP_S3_CREDS_REFRESH=8,4 AWS_CONTAINER_CREDENTIALS_FULL_URI="$URL_rot/container/r")
slow 262144 <slow.bin | c "${ROT[@]}" timeout 300 s3-pipe -v put --part-size 5M -j 2 s3://rot/slow.bin 2>put.err
is "$?" 0 "a slow put (25 s) with credentials that last 12 s: 0"
n=$(grep -c 'credentials=container-role key_id=ROT.* refreshed=1' put.err)
ok test "$n" -ge 2 "... refreshed before they expired ($n times)"
c "${ROT[@]}" timeout 300 s3-pipe -v get --part-size 1M -j 1 s3://rot/slow.bin 2>get.err | slow 262144 >slow.got
same_file slow.got slow.bin "a slow get (25 s) reads it back whole"
n=$(grep -c 'credentials=container-role key_id=ROT.* refreshed=1' get.err)
ok test "$n" -ge 2 "... refreshed before they expired ($n times)"
first=$(sed -n 's/^rotate removed=//p' rot.log | head -n 1)
ok test -n "$first" "radosgw dropped keys that had expired while the streams ran"
run env AWS_ACCESS_KEY_ID="$first" AWS_SECRET_ACCESS_KEY=x s3-pipe ls s3://rot/
like "$rc:$err" "^4:.*InvalidAccessKeyId" "... and refuses them now: the streams did sign with the fresh ones"
run env AWS_ACCESS_KEY_ID="$RGW_KEY2" AWS_SECRET_ACCESS_KEY=x s3-pipe ls s3://rot/
like "$rc:$err" "^4:.*SignatureDoesNotMatch" "... (a key radosgw knows, with a wrong secret, is refused otherwise)"

done_testing
