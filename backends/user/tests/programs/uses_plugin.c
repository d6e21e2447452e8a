/* A program built without instrumentation whose only call sites are in a library it is linked
 * against (examples/c/plugin.c as libplugin.so, found through its DT_RUNPATH $ORIGIN): the
 * tool's site check must look into the libraries a program needs, not only the program. */
#include <stdio.h>

long plugin_work(long x);
long plugin_calls(void);

int main(void) {
    long s = 0;
    for (int i = 0; i < 3; i++)
        s += plugin_work(i);
    printf("plugin_work calls %ld sum %ld\n", plugin_calls(), s);
    return 0;
}
