# tests/readline.py bash|zsh SETUP LINE... - completion as a user meets
# it: an interactive bash (readline) or zsh (zle) in a pseudo-terminal runs
# SETUP (shell commands), then for each LINE: types it, presses TAB once,
# and runs the line as completed as printf's arguments.  Prints each
# completed LINE's words, space-separated, one LINE a line.  Each wait is
# bounded (60 s).
import os
import pty
import select
import sys
import time

shell, setup, lines = sys.argv[1], sys.argv[2], sys.argv[3:]
if shell == "bash":
    setup = "bind 'set bell-style none'; bind 'set enable-bracketed-paste off'; " + setup
    argv, term = ["bash", "--norc", "--noprofile", "-i"], "dumb"
else:  # zle is off on a dumb terminal
    argv, term = ["zsh", "-f", "-i"], "xterm"
pid, fd = pty.fork()
if pid == 0:
    os.environ.update(TERM=term, INPUTRC="/dev/null", HISTFILE="/dev/null")
    os.execvp(argv[0], argv)
buf = b""


def upto(marker):
    """Read the terminal up to MARKER; return what came before it."""
    global buf
    end = time.time() + 60
    while marker not in buf:
        if time.time() > end:
            sys.exit("readline.py: no %r after 60 s; got %r" % (marker, buf[-400:]))
        if select.select([fd], [], [], 0.5)[0]:
            buf += os.read(fd, 4096)
    i = buf.index(marker) + len(marker)
    got, buf = buf[:i], buf[i:]
    return got


# The prompt is written so that its echo is not the prompt itself.
os.write(fd, setup.encode() + b"; PS1='RE''ADY> '\n")
upto(b"READY> ")
for line in lines:
    # TAB, then ^A (line start) printf ... ^E (line end): the words as typed
    # and completed, each in W<...>
    os.write(fd, line.encode() + b"\t\x01printf 'W<%s>' \x05; echo DO''NE\n")
    out = upto(b"DONE\r\n").decode(errors="replace")
    upto(b"READY> ")
    words = out[out.rfind("\n", 0, len(out) - 2) + 1:]
    print(" ".join(w.split(">")[0] for w in words.split("W<")[1:]))
os.write(fd, b"exit\n")
os.waitpid(pid, 0)
