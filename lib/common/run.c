/*
 * run.c - children (dp.h, "Shell commands"): dp_spawn, the one way libdp
 * starts a program, and shell commands run to completion (dp-train's
 * --on-epoch), their {NAME} placeholders filled in (dp_shell_run_vars).
 * The command's words are the caller's to quote (dp_shell_quote).
 */
#define _GNU_SOURCE
#include "dp.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
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

/* path on PATH (or as is when it holds a '/'), into buf: 0, or -1. */
static int find_program(const char *name, char *buf, size_t len)
{
	if (strchr(name, '/'))
		return snprintf(buf, len, "%s", name) < (int)len ? 0 : -1;
	const char *path = dp_env("PATH") ? dp_env("PATH") : "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path;; p++) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n && snprintf(buf, len, "%.*s/%s", (int)n, p, name) < (int)len &&
		    access(buf, X_OK) == 0)
			return 0;
		if (!end)
			return -1;
		p = end;
	}
}

/* The child's environment: env's pairs, then ours but those they replace. */
static char **child_env(const char *const *env)
{
	extern char **environ;
	size_t n = 0, k = 0;
	while (env && env[n])
		n++;
	for (char **v = environ; *v; v++)
		k++;
	char **out = malloc((n + k + 1) * sizeof *out);
	if (!out)
		return NULL;
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		out[m++] = (char *)env[i];
	for (char **v = environ; *v; v++) {
		size_t nl = strcspn(*v, "=");
		int replaced = 0;
		for (size_t i = 0; i < n && !replaced; i++)
			replaced = !strncmp(env[i], *v, nl) && env[i][nl] == '=';
		if (!replaced)
			out[m++] = *v;
	}
	out[m] = NULL;
	return out;
}

int dp_spawn(const dp_child *c, int *pid_out, dp_err *e)
{
	char prog[4096];
	if (c->path ? snprintf(prog, sizeof prog, "%s", c->path) >= (int)sizeof prog
		    : find_program(c->argv[0], prog, sizeof prog) < 0) {
		errno = ENOENT;
		return dp_syserr(e, "cannot run %s", c->argv[0]);
	}
	char **envp = child_env(c->env);
	if (!envp)
		return dp_seterr(e, DP_ENOMEM, "out of memory");
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		free(envp);
		return dp_syserr(e, "cannot run %s: fork", c->argv[0]);
	}
	if (pid == 0) { /* async-signal-safe calls only, until exec */
		sigset_t none;
		sigemptyset(&none);
		for (int s = 1; s < NSIG; s++)
			signal(s, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (c->die_with_thread) {
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			if (getppid() != parent)
				_exit(128 + SIGTERM);
		}
		int in = c->in >= 0 ? c->in : open("/dev/null", O_RDONLY);
		if (in >= 0 && in != STDIN_FILENO)
			dup2(in, STDIN_FILENO);
		if (c->out >= 0 && c->out != STDOUT_FILENO)
			dup2(c->out, STDOUT_FILENO);
		if (c->err >= 0 && c->err != STDERR_FILENO)
			dup2(c->err, STDERR_FILENO);
		execve(prog, c->argv, envp);
		_exit(127);
	}
	free(envp);
	*pid_out = pid;
	return DP_OK;
}

int dp_shell_run(const char *cmd, const char *const *env, int out_fd, int *status, dp_err *e)
{
	if (status)
		*status = 0;
	char *argv[] = {"sh", "-c", (char *)cmd, NULL};
	dp_child c = {"/bin/sh", argv, env, -1, out_fd, -1, 1};
	int pid, ws;
	int rc = dp_spawn(&c, &pid, e);
	if (rc < 0)
		return rc;
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

int dp_shell_run_vars(const char *cmd, const dp_shell_var *vars, size_t n, const char *env_prefix,
		      int out_fd, int *status, dp_err *e)
{
	enum { MAXV = 16 };
	if (n > MAXV)
		return dp_seterr(e, DP_EARG, "%zu variables of a command: at most %d", n, MAXV);
	dp_buf q[MAXV], env[MAXV];
	const char *pairs[2 * MAXV + 1], *envp[MAXV + 1];
	int oom = 0;
	for (size_t i = 0; i < n; i++) {
		q[i] = (dp_buf)DP_BUF_INIT, env[i] = (dp_buf)DP_BUF_INIT;
		if (vars[i].quote)
			dp_shell_quote(&q[i], vars[i].value);
		else
			dp_buf_addstr(&q[i], vars[i].value);
		dp_buf_addstr(&env[i], env_prefix);
		for (const char *c = vars[i].name; *c; c++)
			dp_buf_printf(&env[i], "%c", toupper((unsigned char)*c));
		dp_buf_printf(&env[i], "=%s", vars[i].value);
		oom |= q[i].err || env[i].err;
		pairs[2 * i] = vars[i].name, pairs[2 * i + 1] = q[i].p ? q[i].p : "", envp[i] = env[i].p;
	}
	pairs[2 * n] = NULL, envp[n] = NULL;
	char *x = oom ? NULL : dp_expand(cmd, pairs);
	int rc = x ? dp_shell_run(x, envp, out_fd, status, e) : dp_seterr(e, DP_ENOMEM, "out of memory");
	free(x);
	for (size_t i = 0; i < n; i++) {
		dp_buf_free(&q[i]);
		dp_buf_free(&env[i]);
	}
	return rc;
}
