/* Built against the installed header and library through pkg-config. */
#include <gvmshim.h>

#include <stdio.h>

int main(void)
{
    puts(gvm_strerror(GVM_ERR_UNKNOWN_POINTER));
    return 0;
}
