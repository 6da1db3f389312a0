/* A clang that stays loaded: preloaded into the clang driver (LD_PRELOAD, Linux with glibc),
 * it takes over the program's entry before clang's main runs and serves compiles, one
 * forked child per compile, so a compile does not pay clang's start (mapping and relocating
 * libLLVM and libclang-cpp, their static initializers: ~35-50 ms of CPU per process on the
 * 2-core machine, about half of a fuzz kernel's compile). The child runs clang's own main
 * with the request's arguments in a fresh copy of the loaded program, as `execve` of clang
 * would start it, so its output is the same (core/runtime/emu/clang_server.py and
 * suites/emu/test_clang_server.py).
 *
 * Serving mode only when MT_CLANG_SERVER is set; both it and LD_PRELOAD are cleared first,
 * so programs clang starts (none for `-c`) are plain. Protocol on stdin/stdout (the pipes of
 * the Python side), all integers native uint32:
 *   request:  total length, then NUL-terminated strings: working directory, stdin path
 *             (empty: /dev/null), stdout path, stderr path, the number of arguments in
 *             decimal, the arguments (argv[0] first), then the environment (NAME=value,
 *             the caller's at the time of the request, as a new process would get it)
 *   reply:    the child's pid (0: fork failed, no status follows), then its wait status
 * The child's stdout and stderr are the given files. EOF on stdin ends the server. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void),
                        void (*)(void), void *);

static main_fn real_main;

static int read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t got = read(fd, p, n);
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t put = write(fd, p, n);
        if (put <= 0) return -1;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

static void child(char *request, uint32_t length) {
    static char *strings[1 << 16];
    int count = 0;
    for (char *p = request; p < request + length && count < (1 << 16) - 2; p += strlen(p) + 1)
        strings[count++] = p;
    if (count < 6) _exit(127);
    strings[count] = NULL;
    int argc = atoi(strings[4]);
    if (argc < 1 || argc > count - 5) _exit(127);
    char **argv = strings + 5, **envp = strings + 5 + argc + 1;
    /* the arguments end with a NULL: the environment's first entry moves one up */
    memmove(envp, envp - 1, (size_t)(count - 5 - argc) * sizeof *envp);
    strings[count + 1] = NULL;
    argv[argc] = NULL;
    environ = envp;
    int in = open(strings[1][0] ? strings[1] : "/dev/null", O_RDONLY);
    int out = open(strings[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(strings[3], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0 || chdir(strings[0]) != 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    close(in);
    close(out);
    close(err);
    signal(SIGPIPE, SIG_DFL);
    exit(real_main(argc, argv, envp));
}

static int serve(void) {
    int requests = dup(0), replies = dup(1);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);   /* nothing the server's children inherit reads or writes the pipes */
    dup2(null, 1);
    close(null);
    fcntl(requests, F_SETFD, FD_CLOEXEC);
    fcntl(replies, F_SETFD, FD_CLOEXEC);
    for (;;) {
        uint32_t length;
        if (read_all(requests, &length, sizeof length) != 0) return 0;
        char *request = malloc((size_t)length + 1);
        if (!request || read_all(requests, request, length) != 0) return 1;
        request[length] = '\0';
        pid_t pid = fork();
        if (pid == 0) {
            close(requests);
            close(replies);
            child(request, length);
        }
        free(request);
        /* the pid first: the caller kills a compile that runs past its timeout */
        uint32_t word = pid < 0 ? 0 : (uint32_t)pid;
        if (write_all(replies, &word, sizeof word) != 0) return 1;
        if (pid < 0) continue;
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        word = (uint32_t)status;
        if (write_all(replies, &word, sizeof word) != 0) return 1;
    }
}

static int entry(int argc, char **argv, char **envp) {
    if (getenv("MT_CLANG_SERVER")) {
        unsetenv("MT_CLANG_SERVER");
        unsetenv("LD_PRELOAD");
        unsetenv("LD_BIND_NOW");
        return serve();
    }
    return real_main(argc, argv, envp);
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void),
                      void (*fini)(void), void (*rtld_fini)(void), void *stack_end) {
    start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    real_main = main;
    return real(entry, argc, argv, init, fini, rtld_fini, stack_end);
}
