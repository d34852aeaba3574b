# tests/s3lib.sh - a real S3 server for a test file (bash; source after lib.sh).
#
#   s3_start || { skip_all "why"; }   start radosgw (tests/rgw) in $T/rgw, once per
#                                     file; export the AWS_* settings of its first
#                                     user; stopped (SIGKILL) when the test exits,
#                                     pass or fail
#   s3_setup BUCKET...                in $T: s3_start, or skip the whole file
#                                     with the reason; then the buckets, made
#                                     with aws (one check that the first is)
#   awsr ARGS...                      Debian's aws CLI against that server
#   s3_proxy ARGS...                  start tests/s3-faults.py in front of it;
#                                     sets PROXY_URL, PROXY_LOG; s3_proxy_stop
#
# Sets RGW_URL RGW_PORT RGW_KEY RGW_SECRET RGW_KEY2 RGW_SECRET2 RGW_DIR.

AWS=/usr/bin/aws
_s3_proxy_pid=

_s3_cleanup() {
	s3_proxy_stop
	[ -n "${RGW_DIR:-}" ] && "$DP_SRC/tests/rgw" stop "$RGW_DIR"
	_tap_cleanup
}

s3_start() {
	for p in ceph-mon ceph-osd radosgw radosgw-admin; do
		command -v $p >/dev/null || { S3_WHY="$p not installed (scripts/deps --test)"; return 1; }
	done
	[ -x "$AWS" ] || { S3_WHY="awscli not installed (scripts/deps --test)"; return 1; }
	trap _s3_cleanup EXIT
	local env
	env=$("$DP_SRC/tests/rgw" start "$T/rgw" $$ 2>"$T/rgw.err") || {
		S3_WHY="radosgw did not start: $(tail -n 1 "$T/rgw.err")"
		return 1
	}
	eval "$env"
	export RGW_URL RGW_PORT RGW_KEY RGW_SECRET RGW_KEY2 RGW_SECRET2 RGW_DIR
	# a clean AWS environment: nothing from the user's files
	export HOME="$T/home"
	mkdir -p "$HOME"
	unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE \
		AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_DEFAULT_REGION AWS_CA_BUNDLE
	export AWS_ACCESS_KEY_ID=$RGW_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET
	export AWS_ENDPOINT_URL=$RGW_URL AWS_REGION=us-east-1
	export AWS_EC2_METADATA_DISABLED=true AWS_PAGER=
	return 0
}

awsr() {
	"$AWS" --endpoint-url "$RGW_URL" "$@"
}

# upload_started ERR BYTES URL S3PIPE-ARGS...: `s3-pipe S3PIPE-ARGS` (a put
# of a multipart size to URL) in the background, stdin the FIFO slow (made
# here), stderr ERR; BYTES of big.bin fed to it and the FIFO kept open (fd
# 7); pid its process.  Then a check that its upload shows under URL
# (within 20 s).
upload_started() {
	local err=$1 bytes=$2 url=$3 i
	shift 3
	mkfifo slow
	s3-pipe "$@" <slow 2>"$err" &
	pid=$!
	exec 7>slow
	head -c "$bytes" big.bin >&7
	for i in $(seq 1 200); do
		[ -n "$(s3-pipe ls --uploads "$url")" ] && break
		sleep 0.1
	done
	isnt "$(s3-pipe ls --uploads "$url")" "" "a multipart upload in progress"
}

# s3_proxy FAULT-OPTIONS...: tests/s3-faults.py in front of radosgw.
s3_proxy() {
	s3_proxy_stop
	PROXY_LOG="$T/proxy.$RANDOM.log"
	rm -f "$T/proxy.port"
	$PY "$DP_SRC/tests/s3-faults.py" --upstream "$RGW_URL" --port-file "$T/proxy.port" \
		--log "$PROXY_LOG" "$@" </dev/null >/dev/null 2>&1 &
	_s3_proxy_pid=$!
	# Until it listens: Python's start can take seconds on a loaded
	# machine; a bound only for a proxy that never starts (or died).
	local i
	for i in $(seq 1 1200); do
		[ -s "$T/proxy.port" ] && break
		kill -0 "$_s3_proxy_pid" 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$T/proxy.port" ] || diag "s3-faults.py did not start (args: $*)"
	PROXY_URL="http://127.0.0.1:$(cat "$T/proxy.port" 2>/dev/null)"
	: >>"$PROXY_LOG"
}

s3_proxy_stop() {
	if [ -n "$_s3_proxy_pid" ]; then
		kill "$_s3_proxy_pid" 2>/dev/null
		wait "$_s3_proxy_pid" 2>/dev/null
		_s3_proxy_pid=
	fi
}

s3_setup() {
	cd "$T" || exit 1
	if ! s3_start; then
		echo "1..0 # SKIP $S3_WHY"
		exit 0
	fi
	diag "radosgw at $RGW_URL"
	local b
	for b in "$@"; do
		awsr s3api create-bucket --bucket "$b" >/dev/null 2>&1
	done
	[ $# = 0 ] || ok awsr s3api head-bucket --bucket "$1" "bucket $1 made with aws"
}
