/* A process-directed signal while the main thread blocks it: with every other thread of the
 * process blocking it too (as the agent's threads must), it stays pending until the main thread
 * unblocks it, and the handler runs there. Prints where and when the handler ran. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t handled_on;

static void on_usr1(int sig)
{
	(void)sig;
	handled_on = gettid();
}

__attribute__((noinline)) static void work(void)
{
	__asm__ volatile("" ::: "memory");
}

int main(void)
{
	struct sigaction sa;
	sigset_t usr1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	work();
	kill(getpid(), SIGUSR1);
	usleep(200 * 1000);
	int early = handled_on;
	sigprocmask(SIG_UNBLOCK, &usr1, NULL);
	work();
	printf("while blocked: %s\n", early ? (early == gettid() ? "main" : "another thread") : "pending");
	printf("after unblock: %s\n", handled_on == gettid() ? "main" : "another thread");
	return 0;
}
