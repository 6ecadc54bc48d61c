/* Debugging aid for machines without gdb: LD_PRELOAD this library and a SIGSEGV/SIGABRT prints
 * the native backtrace (addresses with their shared object and offset) to stderr before the
 * process dies. Build: cc -shared -fPIC -O1 -o segv_backtrace.so scripts/segv_backtrace.c */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fatal(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  dprintf(2, "segv_backtrace: signal %d, %d frames\n", sig, n);
  for (int i = 0; i < n; ++i) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname)
      dprintf(2, "  #%d %s+0x%lx (%s)\n", i, info.dli_fname, (unsigned long)((char*)frames[i] - (char*)info.dli_fbase),
              info.dli_sname ? info.dli_sname : "?");
    else
      dprintf(2, "  #%d %p\n", i, frames[i]);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  /* An alternate stack, so a stack overflow in the loading (main) thread is reported too. */
  static char alt[1 << 16];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}
