/*
 * hold.c - one holder of a name on the machine (dp.h, dp_hold_name).
 *
 * The name is hashed into an abstract unix socket address ("\0dptools
 * <hash>"), which the kernel frees with its last descriptor: no lock file
 * to leave behind or to clean up after a kill -9.  The holder listens, so
 * that a second process can connect and learn its pid (SO_PEERCRED).
 */
#define _GNU_SOURCE
#include "dp.h"
#include "dp_hash.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int dp_hold_name(const char *name, int *holder, dp_err *e)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "dptools %016" PRIx64,
			 dp_hash64(name, strlen(name)));
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	*holder = 0;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return dp_syserr(e, "%s: socket", name);
	if (bind(fd, (struct sockaddr *)&a, len) == 0 && listen(fd, 8) == 0)
		return fd;
	int err = errno;
	close(fd);
	if (err != EADDRINUSE) {
		errno = err;
		return dp_syserr(e, "%s: bind", name);
	}
	/* who: connect and ask the kernel for the listener's pid */
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0) {
		struct ucred cr;
		socklen_t cl = sizeof cr;
		if (connect(fd, (struct sockaddr *)&a, len) == 0 &&
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
			*holder = (int)cr.pid;
		close(fd);
	}
	return dp_seterr(e, DP_EARG, "%s: held by another process%s", name, "");
}
