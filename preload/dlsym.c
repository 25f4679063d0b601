/* dlsym is interposed so that a program (or cudart) asking libcuda for an
 * entry point by name gets the hook.
 *
 * dlsym(RTLD_NEXT, ...) means "after the caller", and glibc finds the
 * caller from its own return address. Called through a C wrapper, every
 * such look-up would be answered relative to gvmshim: sanitizer runtimes
 * and other interposers would get their own interceptors back and loop. So
 * the exported entry point is a few instructions that jump (not call) to
 * the real dlsym for RTLD_NEXT, leaving the caller's return address in
 * place, and only other handles reach the C code below. The real dlsym
 * comes from dlvsym; the public one is never called from here. Known
 * limits: dlvsym and dlmopen namespaces bypass the interposition. */
#include "preload/shim.h"

#include <dlfcn.h>

/* Reached from the entry stub below only. */
void *gvm_real_dlsym_resolve(void);
void *gvm_dlsym_lookup(void *handle, const char *name);

/* Read by the entry stub below; filled by gvm_real_dlsym_resolve. */
__attribute__((visibility("hidden"))) void *gvm_real_dlsym_ptr;

__attribute__((visibility("hidden"), used)) GVM_NO_SANITIZE void *gvm_real_dlsym_resolve(void)
{
    gvm_real_dlsym(RTLD_DEFAULT, "dlsym");   /* fills gvm_real_dlsym_ptr */
    return __atomic_load_n(&gvm_real_dlsym_ptr, __ATOMIC_ACQUIRE);
}

__attribute__((visibility("hidden"), used)) GVM_NO_SANITIZE void *gvm_dlsym_lookup(void *handle,
                                                                                 const char *name)
{
    void *r = gvm_real_dlsym(handle, name);
    /* Only names of libcuda's shape ("cu" and a capital: cuMemAlloc, not
     * cudnnCreate or cublasSgemm) are worth a look; everything else goes
     * back untouched before any other work. */
    if (!r || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z' ||
        gvm_shim_loading() || gvm_cfg_disabled())
        return r;
    if (!gvm_shim_driver()) return r;
    void *h = gvm_shim_hook_for(r);
    return h ? h : r;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "  cmpq $-1, %rdi\n"                      /* RTLD_NEXT */
        "  jne gvm_dlsym_lookup\n"
        "  movq gvm_real_dlsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jz 1f\n"
        "  jmp *%rax\n"
        "1:\n"
        "  pushq %rdi\n"
        "  pushq %rsi\n"
        "  subq $8, %rsp\n"
        "  call gvm_real_dlsym_resolve\n"
        "  addq $8, %rsp\n"
        "  popq %rsi\n"
        "  popq %rdi\n"
        "  jmp *%rax\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "  cmn x0, #1\n"
        "  b.ne gvm_dlsym_lookup\n"
        "  adrp x16, gvm_real_dlsym_ptr\n"
        "  ldr x16, [x16, :lo12:gvm_real_dlsym_ptr]\n"
        "  cbz x16, 1f\n"
        "  br x16\n"
        "1:\n"
        "  stp x29, x30, [sp, -32]!\n"
        "  stp x0, x1, [sp, 16]\n"
        "  bl gvm_real_dlsym_resolve\n"
        "  mov x16, x0\n"
        "  ldp x0, x1, [sp, 16]\n"
        "  ldp x29, x30, [sp], 32\n"
        "  br x16\n"
        ".size dlsym, .-dlsym\n");
#else
/* Elsewhere RTLD_NEXT is answered relative to gvmshim (documented). */
GVM_EXPORT void *dlsym(void *handle, const char *name) { return gvm_dlsym_lookup(handle, name); }
#endif
