/*
 * The test cluster's pod sandbox process (containerd's sandbox_image): it
 * holds the pod's namespaces open and does nothing else. It waits for
 * SIGTERM or SIGINT and exits 0; as PID 1 of the pod it also reaps the
 * zombies of containers that share its PID namespace.
 *
 * Built with `gcc -static` by scripts/node-images, so the image needs no libc.
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {0};
    term.sa_handler = stop;
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    struct sigaction child = {0};
    child.sa_handler = reap;
    child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &child, NULL);
    for (;;) {
        pause();
    }
}
