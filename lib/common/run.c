/*
 * run.c - shell commands run to completion (dp.h, "Shell commands"): the
 * --on-epoch hook of dp-train.  The command's words are the caller's to
 * quote (dp_shell_quote); nothing here reads the environment.
 */
#define _GNU_SOURCE
#include "dp.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int dp_shell_quote(dp_buf *b, const char *s)
{
	dp_buf_add(b, "'", 1);
	for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
		dp_buf_add(b, s, (size_t)(q - s));
		dp_buf_add(b, "'\\''", 4);
	}
	dp_buf_addstr(b, s);
	return dp_buf_add(b, "'", 1);
}

int dp_shell_run(const char *cmd, const char *const *env, int out_fd, int *status, dp_err *e)
{
	if (status)
		*status = 0;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return dp_syserr(e, "fork");
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(128 + SIGTERM);
		int in = open("/dev/null", O_RDONLY);
		if (in >= 0 && in != STDIN_FILENO) {
			dup2(in, STDIN_FILENO);
			close(in);
		}
		if (out_fd >= 0 && out_fd != STDOUT_FILENO)
			dup2(out_fd, STDOUT_FILENO);
		for (size_t i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	int ws;
	while (waitpid(pid, &ws, 0) < 0)
		if (errno != EINTR)
			return dp_syserr(e, "wait");
	if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
		return DP_OK;
	if (WIFEXITED(ws)) {
		if (status)
			*status = WEXITSTATUS(ws);
		return dp_seterr(e, DP_EIO, "exited with status %d%s", WEXITSTATUS(ws),
				 WEXITSTATUS(ws) == 127 ? " (not found?)" : "");
	}
	int sig = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
	if (status)
		*status = 128 + sig;
	return dp_seterr(e, DP_EIO, "killed by signal %d (%s)", sig, strsignal(sig));
}
