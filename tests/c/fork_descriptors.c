/* The emulated kernel's descriptors in a vfork child and a forked child
 * (tests/test_emulated_fork.py). Run under the shim; prints one line per check:
 *   parent kfd <version>                    GET_VERSION on /dev/kfd
 *   vfork child closed <fd>: kfd <result>   the parent's next GET_VERSION, after a vfork child
 *                                           closed that descriptor number (CPython's subprocess
 *                                           child does, in the parent's memory, before exec)
 *   fork child kfd: <result>                the child's GET_VERSION on the inherited descriptor
 *   fork child new file at <fd>: <result>   the child closed it and opened /dev/null, which got
 *                                           that number: an ioctl on it is /dev/null's own
 *   fork child render: <result>             DRM_IOCTL_GET_CLIENT on the inherited render node
 *   parent bo mmap <result>                 mmap of a BO of /dev/kfd (ALLOC_MEMORY_OF_GPU)
 *   fork child bo mmap: <result>            the same mmap in a forked child (kfd_mmap finds
 *                                           no KFD process of the child's: EINVAL)
 *   parent render <result> kfd <result>     both still answer the parent
 * <result>: a version "1.N", "ok", or the errno's name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* libdrm-dev's drm.h as <drm/drm.h>, which linux/kfd_ioctl.h includes (the test makes the
 * directory) */
#include <drm/drm.h>
#include <linux/kfd_ioctl.h>

static const char* errname(int e) {
    switch (e) {
    case EBADF: return "EBADF";
    case ENOTTY: return "ENOTTY";
    case EINVAL: return "EINVAL";
    case ENODEV: return "ENODEV";
    default: return strerror(e);
    }
}

static const char* kfd_version(int fd) {
    static char out[32];
    struct kfd_ioctl_get_version_args v = {0};
    if (ioctl(fd, AMDKFD_IOC_GET_VERSION, &v)) return errname(errno);
    snprintf(out, sizeof out, "%u.%u", v.major_version, v.minor_version);
    return out;
}

static const char* render_client(int fd) {
    struct drm_client c = {0};
    return ioctl(fd, DRM_IOCTL_GET_CLIENT, &c) ? errname(errno) : "ok";
}

/* A forked child's result: its exit status indexes this table. */
static const char* const RESULTS[] = {"ok", "EBADF", "ENOTTY", "EINVAL", "other"};
static int result_code(const char* r) {
    for (int i = 0; i < 4; i++)
        if (strcmp(r, RESULTS[i]) == 0 || (i == 0 && r[0] == '1' && r[1] == '.')) return i;
    return 4;
}

static const char* in_fork_child(int (*check)(int, int), int kfd, int render) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(check(kfd, render));
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) < 5 ? RESULTS[WEXITSTATUS(st)] : "died";
}

static int child_kfd(int kfd, int render) {
    (void)render;
    return result_code(kfd_version(kfd));
}

static int child_new_file(int kfd, int render) {
    (void)render;
    close(kfd);
    int f = open("/dev/null", O_RDONLY);
    return f == kfd ? result_code(kfd_version(f)) : 4;
}

static int child_render(int kfd, int render) {
    (void)kfd;
    return result_code(render_client(render));
}

static uint64_t bo_offset; /* the mmap offset of the BO the parent allocated */

static const char* map_bo(int kfd) {
    void* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, kfd, (off_t)bo_offset);
    if (p == MAP_FAILED) return errname(errno);
    munmap(p, 4096);
    return "ok";
}

static int child_map_bo(int kfd, int render) {
    (void)render;
    return result_code(map_bo(kfd));
}

/* A 4 KiB GTT BO on the first GPU node (its gpu_id from the topology in sysfs). */
static const char* alloc_bo(int kfd) {
    FILE* f = fopen("/sys/class/kfd/kfd/topology/nodes/1/gpu_id", "r");
    unsigned gpu_id = 0;
    if (!f || fscanf(f, "%u", &gpu_id) != 1) return "no gpu_id";
    fclose(f);
    void* va = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    struct kfd_ioctl_alloc_memory_of_gpu_args a = {
        .va_addr = (uint64_t)(uintptr_t)va, .size = 4096, .gpu_id = gpu_id,
        .flags = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE};
    if (ioctl(kfd, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &a)) return errname(errno);
    bo_offset = a.mmap_offset;
    return "ok";
}

int main(int argc, char** argv) {
    const char* render_path = argc > 1 ? argv[1] : "/dev/dri/renderD128";
    int kfd = open("/dev/kfd", O_RDWR | O_CLOEXEC);
    int render = open(render_path, O_RDWR | O_CLOEXEC);
    if (kfd < 0 || render < 0) {
        perror("open /dev/kfd or the render node");
        return 2;
    }
    printf("parent kfd %s\n", kfd_version(kfd));
    pid_t pid = vfork();
    if (pid == 0) { /* in the parent's memory until _exit, as CPython's child until exec */
        close(kfd);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    printf("vfork child closed %d: kfd %s\n", kfd, kfd_version(kfd));
    printf("fork child kfd: %s\n", in_fork_child(child_kfd, kfd, render));
    printf("fork child new file at %d: %s\n", kfd, in_fork_child(child_new_file, kfd, render));
    printf("fork child render: %s\n", in_fork_child(child_render, kfd, render));
    const char* alloc = alloc_bo(kfd);
    printf("parent bo alloc %s mmap %s\n", alloc, map_bo(kfd));
    printf("fork child bo mmap: %s\n", in_fork_child(child_map_bo, kfd, render));
    printf("parent render %s kfd %s\n", render_client(render), kfd_version(kfd));
    return 0;
}
