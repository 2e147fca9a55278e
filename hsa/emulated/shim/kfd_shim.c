/* The emulated AMD kernel driver, client side: an LD_PRELOAD library that answers what the
 * amdgpu kernel driver answers to an unmodified ROCm user-space stack (libhsakmt, ROCr,
 * libdrm, rocminfo), with the GPU in a device server process (python -m hsa.emulated.server).
 *
 * Inert unless configured: with AMDGPU_EMULATED_NODE unset every call passes straight to
 * libc. When set, only the paths and descriptors it owns are touched:
 *  - open("/dev/kfd") and open("/dev/dri/renderD<minor>") return a unix-socket connection to
 *    the server of that node (started on demand); ioctls on them are forwarded (the request
 *    number, the argument struct, the data its input pointers point at) and the answer
 *    written back (the struct, and the bytes the server writes at its output pointers);
 *  - mmaps of those descriptors map the memfd the server passed (SCM_RIGHTS) for that mmap
 *    offset (memory, doorbells), at the address asked;
 *  - sysfs/proc paths of the driver (KFD topology, /sys/class/drm, /sys/module/amdgpu,
 *    /proc/modules) read the tree the server wrote into its run directory.
 * Answered here, without a round trip: event waits, sets and resets (the server fires events
 * into a shared page and wakes waiters with a futex), clock counters (CLOCK_MONOTONIC ns,
 * the clock the server stamps packets with), and userptr registration's page swap (the user's
 * pages become a memfd's shared pages of the same content, MAP_FIXED, so the server sees
 * them; the memfd goes to the server with the ALLOC ioctl; other threads' writes to those
 * pages wait out the swap instead of being lost).
 * See docs/ARCHITECTURE.md ("The emulated kernel").
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_FD 65536
#define PAGE 4096ull

/* The wire protocol (hsa/emulated/protocol.py has the same numbers). */
#define PROTOCOL_VERSION 2 /* HELLO carries it in nfds; a server of another version refuses */
#define OP_HELLO 1
#define OP_IOCTL 2
#define KIND_KFD 1
#define KIND_RENDER 2
struct req_head {
    uint32_t op, kind;
    uint64_t request; /* ioctl request; HELLO: render minor */
    uint32_t arglen, extralen;
    uint32_t nfds, pid;
};
struct rep_head {
    int32_t ret; /* 0 or -errno */
    uint32_t arglen;
    uint32_t nwrites; /* then (u64 addr, u32 len, u32 pad, bytes) each */
    uint32_t nkeys;   /* then (u64 mmap offset, u64 size) each, one fd each (SCM_RIGHTS) */
};

/* The events page the server shares with each KFD client (protocol.py: EVENTS_*). */
#define EV_SEQ 0
#define EV_FAULT 64 /* kfd_hsa_memory_exception_data of the last fault */
#define EV_HW_EXCEPTION 96 /* kfd_hsa_hw_exception_data of the last queue reset */
#define EV_SIGNALED 4096 /* u32: manual-reset events' state */
#define EV_FIRED (4096 + 16384) /* u32: times fired */
#define EV_CONSUMED (4096 + 32768) /* u32: EV_FIRED as of the last wait that took it */
#define EV_AUTO (4096 + 49152)
#define EV_TYPE (4096 + 49152 + 4096)
#define EV_PAGE_BYTES 65536
#define MAX_EVENTS 4096
#define EVENT_MEMORY 8
#define EVENT_HW_EXCEPTION 3

/* ioctl numbers answered or marshalled here (linux/kfd_ioctl.h) */
#define IOC_NR(r) ((r) & 0xFF)
#define IOC_TYPE(r) (((r) >> 8) & 0xFF)
#define IOC_SIZE(r) (((r) >> 16) & 0x3FFF)
#define KFD_TYPE 'K'
#define KFD_GET_CLOCK_COUNTERS 0x05
#define KFD_SET_EVENT 0x0A
#define KFD_RESET_EVENT 0x0B
#define KFD_WAIT_EVENTS 0x0C
#define KFD_ACQUIRE_VM 0x15
#define KFD_ALLOC 0x16
#define KFD_FREE 0x17
#define KFD_MAP 0x18
#define KFD_UNMAP 0x19
#define KFD_SMI_EVENTS 0x1F
#define KFD_SVM 0x20
#define SVM_MAX_ATTRS 1024
#define ALLOC_USERPTR (1u << 2)

struct fdinfo {
    uint8_t kind;
    uint16_t minor;
    void* events; /* KFD: the shared events page */
    pid_t opener; /* KFD answers only the process that opened it (kfd_chardev.c: EBADF) */
};
static struct fdinfo fds[MAX_FD];
static int smi_peer[MAX_FD]; /* an SMI event fd's socket peer + 1 (0: not an SMI fd) */

struct mapkey {
    uint64_t key, size;
    int fd;
    uint64_t handle; /* KFD BO handle (0: doorbells, events) */
};
static struct mapkey* keys;
static size_t nkeys, capkeys;

/* The memfds userptr registration put under the program's pages, by their inode: which
 * pages each one backs now is read from /proc/self/maps at every registration, never
 * remembered (the program, malloc's brk and glibc's own munmap change them behind us). */
struct userptr {
    uint64_t dev, ino;
    int fd;
};
static struct userptr* userptrs;
static size_t nuserptrs, capuserptrs;

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; /* tables and every socket */
static int server_gone_said, render_child_said;

/* The process whose memory these tables are. A child made by vfork (CPython's subprocess and
 * multiprocessing start their children so) runs in its parent's memory until it execs, so a
 * close() there of an inherited descriptor number must leave the parent's entry alone: CPython's
 * child closes the /proc/self/fd directory it opened, which is often fd 3, the parent's
 * /dev/kfd, whose ioctls then went to the bare socket (ENOTTY). fork() gives the child a copy
 * of its own: the atfork handler makes the child the owner of that copy. */
static pid_t table_owner;
static void own_tables(void) { table_owner = getpid(); }
__attribute__((constructor)) static void shim_init(void) {
    own_tables();
    pthread_atfork(NULL, NULL, own_tables);
}
static int tables_are_ours(void) { return getpid() == table_owner; }

/* --- libc's own functions --------------------------------------------------------------- */
#define REAL(name, ret, ...)                                                \
    static ret (*real_##name)(__VA_ARGS__);                                 \
    static void resolve_##name(void) {                                      \
        if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name);            \
    }
REAL(open, int, const char*, int, ...)
REAL(open64, int, const char*, int, ...)
REAL(openat, int, int, const char*, int, ...)
REAL(openat64, int, int, const char*, int, ...)
REAL(fopen, FILE*, const char*, const char*)
REAL(fopen64, FILE*, const char*, const char*)
REAL(opendir, DIR*, const char*)
REAL(stat, int, const char*, struct stat*)
REAL(lstat, int, const char*, struct stat*)
REAL(stat64, int, const char*, struct stat64*)
REAL(lstat64, int, const char*, struct stat64*)
REAL(fstatat, int, int, const char*, struct stat*, int)
REAL(fstatat64, int, int, const char*, struct stat64*, int)
REAL(statx, int, int, const char*, int, unsigned, struct statx*)
REAL(fstat, int, int, struct stat*)
REAL(fstat64, int, int, struct stat64*)
REAL(access, int, const char*, int)
REAL(faccessat, int, int, const char*, int, int)
REAL(readlink, ssize_t, const char*, char*, size_t)
REAL(close, int, int)
REAL(dup, int, int)
REAL(dup2, int, int, int)
REAL(dup3, int, int, int, int)
REAL(fcntl, int, int, int, ...)
REAL(fcntl64, int, int, int, ...)
REAL(ioctl, int, int, unsigned long, ...)
REAL(mmap, void*, void*, size_t, int, int, int, off_t)
REAL(mmap64, void*, void*, size_t, int, int, int, off64_t)

/* --- configuration: the node and its run directory --------------------------------------- */
static const char* node_spec(void) {
    const char* s = getenv("AMDGPU_EMULATED_NODE");
    return (s && *s) ? s : NULL;
}

/* /tmp/amdgpu-emulated-<uid>/<spec, [A-Za-z0-9,] kept, others '_'> (protocol.run_dir) */
static int run_dir(char* out, size_t n) {
    const char* spec = node_spec();
    if (!spec) return -1;
    char key[256];
    size_t i = 0;
    for (; spec[i] && i < sizeof key - 1; i++) {
        char c = spec[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == ',';
        key[i] = ok ? c : '_';
    }
    key[i] = 0;
    snprintf(out, n, "/tmp/amdgpu-emulated-%u/%s", (unsigned)getuid(), key);
    return 0;
}

static const char* const OWNED[] = {
    "/sys/devices/virtual/kfd", "/sys/class/kfd", "/sys/class/drm", "/sys/module/amdgpu",
    "/proc/modules", "/dev/kfd", "/dev/dri/renderD", "/sys/dev/char/226:", NULL,
};

static int owned(const char* path) {
    if (!path || path[0] != '/' || !node_spec()) return 0;
    for (int i = 0; OWNED[i]; i++) {
        size_t n = strlen(OWNED[i]);
        if (strncmp(path, OWNED[i], n) == 0 &&
            (path[n] == 0 || path[n] == '/' || OWNED[i][n - 1] == 'D' ||
             OWNED[i][n - 1] == ':'))
            return 1;
    }
    return 0;
}

/* The run directory's copy of an owned path (else the path itself). */
static const char* redirect(const char* path, char* buf, size_t n) {
    if (!owned(path)) return path;
    char dir[PATH_MAX];
    if (run_dir(dir, sizeof dir)) return path;
    snprintf(buf, n, "%s%s", dir, path);
    return buf;
}

/* --- the connection to the server -------------------------------------------------------- */
static void say_gone(const char* why) {
    if (!server_gone_said) {
        server_gone_said = 1;
        char dir[PATH_MAX] = "?";
        run_dir(dir, sizeof dir);
        fprintf(stderr,
                "amdgpu emulated kernel: the device server of %s is gone (%s); restart the "
                "program (scripts/emulated.sh starts a new server; its log: %s/server.log)\n",
                node_spec() ? node_spec() : "?", why, dir);
    }
}

static int send_all(int s, const void* p, size_t n) {
    const char* c = p;
    while (n) {
        ssize_t k = send(s, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int s, void* p, size_t n) {
    char* c = p;
    while (n) {
        ssize_t k = recv(s, c, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One request with up to one fd; the reply head with the fds that came with it. */
static int exchange(int s, const struct req_head* h, const void* arg, const void* extra,
                    int send_fd, struct rep_head* rep, int* rfds, int maxfds, int* nrfds) {
    struct iovec iov[3] = {{(void*)h, sizeof *h}, {(void*)arg, h->arglen},
                           {(void*)extra, h->extralen}};
    char cbuf[CMSG_SPACE(sizeof(int) * 16)];
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = 3;
    if (send_fd >= 0) {
        m.msg_control = cbuf;
        m.msg_controllen = CMSG_SPACE(sizeof(int));
        struct cmsghdr* c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &send_fd, sizeof(int));
    }
    size_t total = sizeof *h + h->arglen + h->extralen;
    ssize_t k;
    do k = sendmsg(s, &m, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0) return -1;
    if ((size_t)k < total) { /* the rest without the fd */
        char* all = malloc(total);
        if (!all) return -1;
        memcpy(all, h, sizeof *h);
        memcpy(all + sizeof *h, arg, h->arglen);
        memcpy(all + sizeof *h + h->arglen, extra, h->extralen);
        int r = send_all(s, all + k, total - (size_t)k);
        free(all);
        if (r) return -1;
    }
    /* the reply head arrives in one message with its fds */
    struct iovec riov = {rep, sizeof *rep};
    struct msghdr rm = {0};
    rm.msg_iov = &riov;
    rm.msg_iovlen = 1;
    rm.msg_control = cbuf;
    rm.msg_controllen = sizeof cbuf;
    do k = recvmsg(s, &rm, MSG_CMSG_CLOEXEC);
    while (k < 0 && errno == EINTR);
    if (k <= 0) return -1;
    *nrfds = 0;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&rm); c; c = CMSG_NXTHDR(&rm, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < n && *nrfds < maxfds; i++)
                memcpy(&rfds[(*nrfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
    }
    if ((size_t)k < sizeof *rep && recv_all(s, (char*)rep + k, sizeof *rep - (size_t)k))
        return -1;
    return 0;
}

static void add_key(uint64_t key, uint64_t size, int fd, uint64_t handle) {
    if (nkeys == capkeys) {
        capkeys = capkeys ? capkeys * 2 : 64;
        keys = realloc(keys, capkeys * sizeof *keys);
    }
    keys[nkeys++] = (struct mapkey){key, size, fd, handle};
}

/* Read the reply body: the args back into `arg`, writes applied, mmap keys recorded. */
static int finish_reply(int s, const struct rep_head* rep, void* arg, uint32_t arglen,
                        const int* rfds, int nrfds) {
    if (rep->arglen) {
        char tmp[16384];
        if (rep->arglen > sizeof tmp || recv_all(s, tmp, rep->arglen)) return -1;
        memcpy(arg, tmp, rep->arglen < arglen ? rep->arglen : arglen);
    }
    for (uint32_t i = 0; i < rep->nwrites; i++) {
        struct { uint64_t addr; uint32_t len, pad; } w;
        if (recv_all(s, &w, sizeof w)) return -1;
        if (recv_all(s, (void*)(uintptr_t)w.addr, w.len)) return -1;
    }
    for (uint32_t i = 0; i < rep->nkeys; i++) {
        struct { uint64_t key, size; } k;
        if (recv_all(s, &k, sizeof k)) return -1;
        if ((int)i < nrfds) add_key(k.key, k.size, rfds[i], 0);
    }
    return 0;
}

/* posix_spawn `python -m hsa.emulated.server --daemon` of the tree this library was built in
 * (<root>/build/emulated/libamdgpu_kfd.so: <root>/.venv/bin/python, else the one
 * AMDGPU_EMULATED_PYTHON names, else python3; PYTHONPATH=<root>). */
static void start_server(void) {
    Dl_info info;
    if (!dladdr((void*)&start_server, &info) || !info.dli_fname) return;
    char root[PATH_MAX];
    if (!realpath(info.dli_fname, root)) return;
    for (int i = 0; i < 3; i++) {
        char* slash = strrchr(root, '/');
        if (!slash) return;
        *slash = 0;
    }
    char python[PATH_MAX + 32], pypath[PATH_MAX + 16], node[300];
    snprintf(python, sizeof python, "%s/.venv/bin/python", root);
    /* no venv beside the tree (scripts/rocm6.sh's root filesystem): the Python it names */
    const char* named = getenv("AMDGPU_EMULATED_PYTHON");
    if (access(python, X_OK) && named && *named)
        snprintf(python, sizeof python, "%s", named);
    if (access(python, X_OK)) snprintf(python, sizeof python, "python3");
    snprintf(pypath, sizeof pypath, "PYTHONPATH=%s", root);
    snprintf(node, sizeof node, "AMDGPU_EMULATED_NODE=%s", node_spec());
    char* argv[] = {python, "-m", "hsa.emulated.server", "--daemon", NULL};
    char* envp[] = {pypath, node, "PATH=/usr/bin:/bin", NULL};
    /* the server must not keep this process's descriptors (pipes a parent reads to EOF,
     * sockets): only 0-2 go along, and --daemon replaces those */
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    struct rlimit lim;
    int top = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536 ? (int)lim.rlim_cur : 65536;
    for (int fd = 3; fd < top; fd++)
        if (fcntl(fd, F_GETFD) >= 0) posix_spawn_file_actions_addclose(&actions, fd);
    pid_t pid;
    int spawned = posix_spawnp(&pid, python, &actions, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned == 0) {
        int st;
        waitpid(pid, &st, 0); /* --daemon returns once the socket listens (or it failed) */
    }
}

static int connect_server(void) {
    char dir[PATH_MAX];
    if (run_dir(dir, sizeof dir)) return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(dir) + 6 > sizeof a.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(a.sun_path, dir, strlen(dir));
    memcpy(a.sun_path + strlen(dir), "/sock", 6);
    for (int attempt = 0; attempt < 2; attempt++) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return -1;
        if (connect(s, (struct sockaddr*)&a, sizeof a) == 0) return s;
        real_close(s);
        if (attempt == 0) start_server();
    }
    fprintf(stderr,
            "amdgpu emulated kernel: no device server for node %s at %s/sock and none could "
            "be started; see %s/server.log, or start one: python -m hsa.emulated.server\n",
            node_spec(), dir, dir);
    errno = ENOENT;
    return -1;
}

static int open_device(const char* path, int flags) {
    resolve_close();
    int kind, minor = 0;
    if (strcmp(path, "/dev/kfd") == 0)
        kind = KIND_KFD;
    else if (sscanf(path, "/dev/dri/renderD%d", &minor) == 1)
        kind = KIND_RENDER;
    else {
        errno = ENOENT;
        return -1;
    }
    struct req_head h = {OP_HELLO, (uint32_t)kind, (uint64_t)minor, 0, 0, PROTOCOL_VERSION,
                         (uint32_t)getpid()};
    struct rep_head rep;
    int rfds[4], nr = 0, s = -1;
    /* a server that is just exiting (idle) may take the connection and never answer it:
     * then connect again, which starts a new one */
    for (int attempt = 0;; attempt++) {
        s = connect_server();
        if (s < 0) return -1;
        if (s >= MAX_FD) {
            real_close(s);
            errno = EMFILE;
            return -1;
        }
        rep.ret = 0;
        nr = 0;
        pthread_mutex_lock(&lock);
        int failed = exchange(s, &h, NULL, NULL, -1, &rep, rfds, 4, &nr);
        if (!failed && !rep.ret) break;
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < nr; i++) real_close(rfds[i]);
        real_close(s);
        if (!failed && rep.ret == -EPROTO) {
            char dir[PATH_MAX] = "?";
            run_dir(dir, sizeof dir);
            fprintf(stderr, "amdgpu emulated kernel: the device server of %s runs another "
                    "version of the emulated kernel; stop it (the pid in %s/lock) or wait 30 s "
                    "for it to exit idle\n", node_spec(), dir);
        }
        if (!failed || attempt == 2) {
            errno = rep.ret ? -rep.ret : ENODEV;
            return -1;
        }
        usleep(200000);
    }
    /* the body (the events page's key) is not needed: its fd is mapped right here */
    char drain[256];
    size_t body = rep.arglen + (size_t)rep.nkeys * 16;
    if (body > sizeof drain || recv_all(s, drain, body)) {
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < nr; i++) real_close(rfds[i]);
        real_close(s);
        errno = ENODEV;
        return -1;
    }
    void* events = NULL;
    if (kind == KIND_KFD && nr > 0) {
        resolve_mmap();
        events = real_mmap(NULL, EV_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, rfds[0], 0);
        real_close(rfds[0]);
        if (events == MAP_FAILED) events = NULL;
    }
    fds[s] = (struct fdinfo){(uint8_t)kind, (uint16_t)minor, events, getpid()};
    pthread_mutex_unlock(&lock);
    if (!(flags & O_CLOEXEC)) fcntl(s, F_SETFD, 0);
    return s;
}

/* --- open and friends --------------------------------------------------------------------- */
static int is_device(const char* path) {
    return owned(path) && (strcmp(path, "/dev/kfd") == 0 ||
                           strncmp(path, "/dev/dri/renderD", 16) == 0);
}

#define MODE_ARG(flags, mode)                          \
    mode_t mode = 0;                                   \
    if ((flags) & (O_CREAT | __O_TMPFILE)) {           \
        va_list ap;                                    \
        va_start(ap, flags);                           \
        mode = va_arg(ap, mode_t);                     \
        va_end(ap);                                    \
    }

EXPORT int open(const char* path, int flags, ...) {
    MODE_ARG(flags, mode);
    resolve_open();
    if (is_device(path)) return open_device(path, flags);
    char buf[PATH_MAX];
    return real_open(redirect(path, buf, sizeof buf), flags, mode);
}

EXPORT int open64(const char* path, int flags, ...) {
    MODE_ARG(flags, mode);
    resolve_open64();
    if (is_device(path)) return open_device(path, flags);
    char buf[PATH_MAX];
    return real_open64(redirect(path, buf, sizeof buf), flags, mode);
}

EXPORT int openat(int dirfd, const char* path, int flags, ...) {
    MODE_ARG(flags, mode);
    resolve_openat();
    if (is_device(path)) return open_device(path, flags);
    char buf[PATH_MAX];
    return real_openat(dirfd, redirect(path, buf, sizeof buf), flags, mode);
}

EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
    MODE_ARG(flags, mode);
    resolve_openat64();
    if (is_device(path)) return open_device(path, flags);
    char buf[PATH_MAX];
    return real_openat64(dirfd, redirect(path, buf, sizeof buf), flags, mode);
}

EXPORT FILE* fopen(const char* path, const char* mode) {
    resolve_fopen();
    char buf[PATH_MAX];
    return real_fopen(redirect(path, buf, sizeof buf), mode);
}

EXPORT FILE* fopen64(const char* path, const char* mode) {
    resolve_fopen64();
    char buf[PATH_MAX];
    return real_fopen64(redirect(path, buf, sizeof buf), mode);
}

EXPORT DIR* opendir(const char* path) {
    resolve_opendir();
    char buf[PATH_MAX];
    return real_opendir(redirect(path, buf, sizeof buf));
}

/* A render node stats as the kernel's: a character device 226:<minor>. libdrm tells GPUs
 * apart by st_rdev and /sys/dev/char/226:<minor>/device/drm (amdgpu_device_initialize's
 * fd_compare); with the run directory's plain files every GPU looked like one device. */
#define DRM_MAJOR 226
static int render_minor_of_path(const char* path) {
    int minor;
    if (!is_device(path) || sscanf(path, "/dev/dri/renderD%d", &minor) != 1) return -1;
    return minor;
}

static int render_minor_of_fd(int fd) {
    return fd >= 0 && fd < MAX_FD && fds[fd].kind == KIND_RENDER ? fds[fd].minor : -1;
}

#define AS_RENDER(r, st, minor)                                   \
    do {                                                          \
        if ((r) == 0 && (minor) >= 0) {                           \
            (st)->st_mode = S_IFCHR | 0666;                       \
            (st)->st_rdev = makedev(DRM_MAJOR, (unsigned)(minor)); \
        }                                                         \
    } while (0)

/* fstatat's and statx's minor: of the fd itself (AT_EMPTY_PATH), else of the path */
static int render_minor_at(int dirfd, const char* path, int flags) {
    if (path && !*path && (flags & AT_EMPTY_PATH)) return render_minor_of_fd(dirfd);
    return render_minor_of_path(path);
}

EXPORT int fstat(int fd, struct stat* st) {
    resolve_fstat();
    int r = real_fstat(fd, st);
    AS_RENDER(r, st, render_minor_of_fd(fd));
    return r;
}

EXPORT int fstat64(int fd, struct stat64* st) {
    resolve_fstat64();
    int r = real_fstat64(fd, st);
    AS_RENDER(r, st, render_minor_of_fd(fd));
    return r;
}

EXPORT int stat(const char* path, struct stat* st) {
    resolve_stat();
    char buf[PATH_MAX];
    int r = real_stat(redirect(path, buf, sizeof buf), st);
    AS_RENDER(r, st, render_minor_of_path(path));
    return r;
}

EXPORT int lstat(const char* path, struct stat* st) {
    resolve_lstat();
    char buf[PATH_MAX];
    int r = real_lstat(redirect(path, buf, sizeof buf), st);
    AS_RENDER(r, st, render_minor_of_path(path));
    return r;
}

EXPORT int stat64(const char* path, struct stat64* st) {
    resolve_stat64();
    char buf[PATH_MAX];
    int r = real_stat64(redirect(path, buf, sizeof buf), st);
    AS_RENDER(r, st, render_minor_of_path(path));
    return r;
}

EXPORT int lstat64(const char* path, struct stat64* st) {
    resolve_lstat64();
    char buf[PATH_MAX];
    int r = real_lstat64(redirect(path, buf, sizeof buf), st);
    AS_RENDER(r, st, render_minor_of_path(path));
    return r;
}

EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
    resolve_fstatat();
    char buf[PATH_MAX];
    int r = real_fstatat(dirfd, redirect(path, buf, sizeof buf), st, flags);
    AS_RENDER(r, st, render_minor_at(dirfd, path, flags));
    return r;
}

EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
    resolve_fstatat64();
    char buf[PATH_MAX];
    int r = real_fstatat64(dirfd, redirect(path, buf, sizeof buf), st, flags);
    AS_RENDER(r, st, render_minor_at(dirfd, path, flags));
    return r;
}

EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* st) {
    resolve_statx();
    char buf[PATH_MAX];
    int r = real_statx(dirfd, redirect(path, buf, sizeof buf), flags, mask, st);
    int minor = render_minor_at(dirfd, path, flags);
    if (r == 0 && minor >= 0) {
        st->stx_mode = S_IFCHR | 0666;
        st->stx_rdev_major = DRM_MAJOR;
        st->stx_rdev_minor = (unsigned)minor;
    }
    return r;
}

EXPORT int access(const char* path, int how) {
    resolve_access();
    char buf[PATH_MAX];
    return real_access(redirect(path, buf, sizeof buf), how);
}

EXPORT int faccessat(int dirfd, const char* path, int how, int flags) {
    resolve_faccessat();
    char buf[PATH_MAX];
    return real_faccessat(dirfd, redirect(path, buf, sizeof buf), how, flags);
}

EXPORT ssize_t readlink(const char* path, char* out, size_t n) {
    resolve_readlink();
    char buf[PATH_MAX];
    return real_readlink(redirect(path, buf, sizeof buf), out, n);
}

EXPORT int close(int fd) {
    resolve_close();
    if (fd >= 0 && fd < MAX_FD && (smi_peer[fd] || fds[fd].kind) && !tables_are_ours())
        return real_close(fd); /* a vfork child: these are its parent's tables */
    if (fd >= 0 && fd < MAX_FD && smi_peer[fd]) {
        real_close(smi_peer[fd] - 1);
        smi_peer[fd] = 0;
    }
    if (fd >= 0 && fd < MAX_FD && fds[fd].kind) {
        pthread_mutex_lock(&lock);
        int shared = 0;
        for (int i = 0; i < MAX_FD && fds[fd].events; i++)
            if (i != fd && fds[i].events == fds[fd].events) shared = 1;
        if (fds[fd].events && !shared) munmap(fds[fd].events, EV_PAGE_BYTES);
        fds[fd] = (struct fdinfo){0};
        pthread_mutex_unlock(&lock);
    }
    return real_close(fd);
}

/* A duplicate of a device descriptor (libdrm keeps one) is the same device. The events
 * page is not shared: only the original's close unmaps it. */
static int copy_fd(int from, int to) {
    if (to >= 0 && to < MAX_FD && from >= 0 && from < MAX_FD && tables_are_ours()) {
        pthread_mutex_lock(&lock);
        fds[to] = fds[from];
        if (fds[to].kind == KIND_KFD && fds[from].events)
            fds[to].events = fds[from].events; /* waits on the dup see the same page */
        pthread_mutex_unlock(&lock);
    }
    return to;
}

static int owned_fd(int fd) { return fd >= 0 && fd < MAX_FD && fds[fd].kind; }

EXPORT int dup(int fd) {
    resolve_dup();
    int r = real_dup(fd);
    return (r >= 0 && owned_fd(fd)) ? copy_fd(fd, r) : r;
}

EXPORT int dup2(int fd, int to) {
    resolve_dup2();
    int r = real_dup2(fd, to);
    return (r >= 0 && owned_fd(fd)) ? copy_fd(fd, r) : r;
}

EXPORT int dup3(int fd, int to, int flags) {
    resolve_dup3();
    int r = real_dup3(fd, to, flags);
    return (r >= 0 && owned_fd(fd)) ? copy_fd(fd, r) : r;
}

static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, va_list ap) {
    long arg = va_arg(ap, long);
    int r = real(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && owned_fd(fd)) copy_fd(fd, r);
    return r;
}

EXPORT int fcntl(int fd, int cmd, ...) {
    resolve_fcntl();
    va_list ap;
    va_start(ap, cmd);
    int r = fcntl_common(real_fcntl, fd, cmd, ap);
    va_end(ap);
    return r;
}

EXPORT int fcntl64(int fd, int cmd, ...) {
    resolve_fcntl64();
    resolve_fcntl();
    va_list ap;
    va_start(ap, cmd);
    int r = fcntl_common(real_fcntl64 ? real_fcntl64 : real_fcntl, fd, cmd, ap);
    va_end(ap);
    return r;
}

/* --- mmap of the device descriptors: the memfd the server passed for that offset -------- */
static void* map_owned(void* addr, size_t len, int prot, int flags, int fd, uint64_t off) {
    if (fds[fd].kind == KIND_KFD && fds[fd].opener != getpid()) {
        errno = EINVAL; /* kfd_mmap: kfd_get_process finds no KFD process of a forked child */
        return MAP_FAILED;
    }
    pthread_mutex_lock(&lock);
    int memfd = -1;
    uint64_t at = 0;
    for (size_t i = nkeys; i-- > 0;) {
        if (off >= keys[i].key && off - keys[i].key < keys[i].size) {
            memfd = keys[i].fd;
            at = off - keys[i].key;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (memfd < 0) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    /* private (no host access) maps stay shared: the server's view must be the same pages */
    flags = (flags & ~MAP_PRIVATE) | MAP_SHARED;
    return real_mmap(addr, len, prot, flags, memfd, (off_t)at);
}

EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
    resolve_mmap();
    if (fd >= 0 && fd < MAX_FD && fds[fd].kind)
        return map_owned(addr, len, prot, flags, fd, (uint64_t)off);
    return real_mmap(addr, len, prot, flags, fd, off);
}

EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) {
    resolve_mmap64();
    if (fd >= 0 && fd < MAX_FD && fds[fd].kind)
        return map_owned(addr, len, prot, flags, fd, (uint64_t)off);
    return real_mmap64(addr, len, prot, flags, fd, off);
}

/* --- ioctls answered here ----------------------------------------------------------------- */
static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int server_alive(int fd) {
    struct pollfd p = {fd, POLLRDHUP, 0};
    return !(poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

static void futex_wake_all(uint32_t* word) {
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int set_event(struct fdinfo* f, uint32_t id, int on) {
    if (!f->events || id >= MAX_EVENTS) {
        errno = EINVAL;
        return -1;
    }
    char* page = f->events;
    uint32_t* signaled = (uint32_t*)(page + EV_SIGNALED);
    uint32_t* fired = (uint32_t*)(page + EV_FIRED);
    uint32_t* consumed = (uint32_t*)(page + EV_CONSUMED);
    if (on) { /* as the server's devside_fire */
        __atomic_add_fetch(&fired[id], 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&signaled[id], 1u, __ATOMIC_SEQ_CST);
        __atomic_add_fetch((uint32_t*)page, 1, __ATOMIC_SEQ_CST);
        futex_wake_all((uint32_t*)page);
    } else {
        __atomic_store_n(&signaled[id], 0u, __ATOMIC_SEQ_CST);
        __atomic_store_n(&consumed[id], __atomic_load_n(&fired[id], __ATOMIC_SEQ_CST),
                         __ATOMIC_SEQ_CST);
    }
    return 0;
}

/* AMDKFD_IOC_WAIT_EVENTS over the shared events page, with KFD's semantics: a manual-reset
 * event counts while signaled; an auto-reset one counts if it fired during this wait (every
 * waiter sees that, as KFD wakes them all) or fired before with no wait having taken it
 * since; a wait that returns takes its auto-reset events. */
#define MAX_WAIT 256
static int wait_events(int fd, struct fdinfo* f, char* arg) {
    char* page = f->events;
    if (!page) {
        errno = EINVAL;
        return -1;
    }
    char* events = (char*)(uintptr_t)*(uint64_t*)(arg + 0);
    uint32_t n = *(uint32_t*)(arg + 8), all = *(uint32_t*)(arg + 12);
    uint32_t timeout_ms = *(uint32_t*)(arg + 16);
    uint32_t* seqp = (uint32_t*)page;
    uint32_t* signaled = (uint32_t*)(page + EV_SIGNALED);
    uint32_t* fired = (uint32_t*)(page + EV_FIRED);
    uint32_t* consumed = (uint32_t*)(page + EV_CONSUMED);
    uint8_t* autoreset = (uint8_t*)(page + EV_AUTO);
    uint8_t* type = (uint8_t*)(page + EV_TYPE);
    if (n > MAX_WAIT) {
        errno = EINVAL;
        return -1;
    }
    uint32_t start[MAX_WAIT];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = *(uint32_t*)(events + i * 48 + 40);
        start[i] = id < MAX_EVENTS ? __atomic_load_n(&fired[id], __ATOMIC_SEQ_CST) : 0;
    }
    uint64_t deadline = timeout_ms == 0xFFFFFFFFu ? UINT64_MAX : now_ns() + timeout_ms * 1000000ull;
    for (;;) {
        uint32_t seq = __atomic_load_n(seqp, __ATOMIC_SEQ_CST);
        uint32_t hit = 0, ready[MAX_WAIT];
        for (uint32_t i = 0; i < n; i++) {
            uint32_t id = *(uint32_t*)(events + i * 48 + 40);
            ready[i] = 0;
            if (id >= MAX_EVENTS) continue;
            uint32_t now_fired = __atomic_load_n(&fired[id], __ATOMIC_SEQ_CST);
            if (autoreset[id])
                ready[i] = now_fired != start[i] ||
                           now_fired != __atomic_load_n(&consumed[id], __ATOMIC_SEQ_CST);
            else
                ready[i] = __atomic_load_n(&signaled[id], __ATOMIC_SEQ_CST) != 0;
            hit += ready[i];
        }
        if (n && (all ? hit == n : hit > 0)) {
            for (uint32_t i = 0; i < n; i++) {
                char* ev = events + i * 48;
                uint32_t id = *(uint32_t*)(ev + 40);
                if (!ready[i]) continue;
                if (type[id] == EVENT_MEMORY) memcpy(ev, page + EV_FAULT, 32);
                if (type[id] == EVENT_HW_EXCEPTION) memcpy(ev, page + EV_HW_EXCEPTION, 16);
                if (autoreset[id]) {
                    __atomic_store_n(&consumed[id], __atomic_load_n(&fired[id], __ATOMIC_SEQ_CST),
                                     __ATOMIC_SEQ_CST);
                    __atomic_store_n(&signaled[id], 0u, __ATOMIC_SEQ_CST);
                }
            }
            *(uint32_t*)(arg + 20) = 0; /* KFD_IOC_WAIT_RESULT_COMPLETE */
            return 0;
        }
        uint64_t now = now_ns();
        if (now >= deadline) {
            *(uint32_t*)(arg + 20) = 1; /* KFD_IOC_WAIT_RESULT_TIMEOUT */
            return 0;
        }
        if (!server_alive(fd)) {
            say_gone("it closed the connection during an event wait");
            _exit(70); /* nothing can ever signal this wait: end instead of hanging */
        }
        uint64_t left = deadline - now, slice = 100000000ull;
        if (left > slice) left = slice;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        syscall(SYS_futex, seqp, FUTEX_WAIT, seq, &ts, NULL, 0);
    }
}

/* /proc/self/maps, whole, NUL-terminated (malloc'd; NULL if unreadable). */
static char* read_maps(void) {
    resolve_open();
    int f = real_open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (f < 0) return NULL;
    size_t cap = 1 << 16, n = 0;
    char* buf = malloc(cap);
    for (ssize_t k; buf; n += (size_t)k) {
        if (n + 1 == cap) {
            char* bigger = realloc(buf, cap *= 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
        }
        k = read(f, buf + n, cap - 1 - n);
        if (k <= 0) break;
    }
    real_close(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* One of our memfds backs every page of [start, end), in vmas at consecutive offsets: its
 * fd and the offset of `start` in it; else -1. Closes our memfds that nothing maps any more
 * (the server keeps its own descriptor of those still registered). */
static int userptr_backing(const char* maps, uint64_t start, uint64_t end, uint64_t* off) {
    char* seen = calloc(nuserptrs + 1, 1);
    if (!seen) return -1;
    int found = -1, run = -1; /* run: the memfd (index) covering start.. so far; -2 broken */
    uint64_t at = start, want = 0;
    for (const char* line = maps; *line;) {
        unsigned long lo, hi, pgoff, ino;
        unsigned maj, mnr;
        if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &lo, &hi, &pgoff, &maj, &mnr, &ino) == 6) {
            int idx = -1;
            for (size_t i = 0; i < nuserptrs; i++)
                if (userptrs[i].ino == ino && userptrs[i].dev == (uint64_t)makedev(maj, mnr))
                    idx = (int)i;
            if (idx >= 0) {
                seen[idx] = 1;
                if (found < 0 && run != -2 && lo <= at && at < hi) {
                    uint64_t o = pgoff + (at - lo); /* maps' offset is in bytes */
                    if (at == start) {
                        run = idx;
                        *off = o;
                    } else if (idx != run || o != want) {
                        run = -2;
                    }
                    if (run == idx) {
                        want = o + (hi - at);
                        at = hi;
                        if (at >= end) found = userptrs[idx].fd;
                    }
                }
            }
        }
        const char* nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    for (size_t i = 0; i < nuserptrs;) {
        if (!seen[i]) {
            real_close(userptrs[i].fd);
            userptrs[i] = userptrs[--nuserptrs];
            seen[i] = seen[nuserptrs];
        } else {
            i++;
        }
    }
    free(seen);
    return found;
}

/* The page swap is atomic for the program's other threads: the range is made read-only
 * while its pages are copied into the memfd and the memfd is mapped over them, and a write
 * to it in between faults into swap_fault, which holds the writer until the memfd is in
 * place and returns, so the write lands on the new pages. Without this, a write another
 * thread made between the copy and the mapping was lost: malloc's bookkeeping in a page
 * shared with a pinned small buffer (hip_memcpy2d's "unaligned tcache chunk" aborts).
 * The handler stays installed once a swap has put it there (re-installed by a later swap
 * if the program replaced it): a fault made in the window may be delivered after it ends,
 * and an action put back by then (SIG_DFL) killed the process (1 run of ~30, SIGSEGV).
 * Such a late fault lies in a range swapped lately and is retried once. */
#define SWAP_RECENT 16
static uint32_t swap_word; /* futex word: odd while a swap is under way; counts them */
static volatile uint64_t swap_lo[SWAP_RECENT], swap_hi[SWAP_RECENT]; /* the last swaps' */
static struct sigaction swap_before; /* SIGSEGV's action before ours, for other faults */
static __thread uint64_t swap_retried; /* the address this thread last retried late */

static void swap_fault(int sig, siginfo_t* si, void* context) {
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    uint32_t word = __atomic_load_n(&swap_word, __ATOMIC_ACQUIRE);
    unsigned at = (word >> 1) % SWAP_RECENT; /* the latest swap's slot */
    if ((word & 1) && a >= swap_lo[at] && a < swap_hi[at]) {
        while (__atomic_load_n(&swap_word, __ATOMIC_ACQUIRE) == word)
            syscall(SYS_futex, &swap_word, FUTEX_WAIT, word, NULL, NULL, 0);
        return; /* the faulting write runs again, on the memfd's pages */
    }
    for (unsigned i = 0; i < SWAP_RECENT && a != swap_retried; i++)
        if (a >= swap_lo[i] && a < swap_hi[i]) {
            swap_retried = a; /* made in a window, delivered after it: once more */
            return;
        }
    /* a fault that is not ours: what the action before would have done */
    if (swap_before.sa_flags & SA_SIGINFO) {
        swap_before.sa_sigaction(sig, si, context);
    } else if (swap_before.sa_handler == SIG_DFL || swap_before.sa_handler == SIG_IGN) {
        sigaction(SIGSEGV, &swap_before, NULL); /* the fault comes again and takes its course */
    } else {
        swap_before.sa_handler(sig);
    }
}

/* Copies the resident pages of [start, end) into mfd and maps mfd over them, with writers
 * held off (above). `resident` has a byte per page, outside the range: this thread may not
 * write the range in the window (it would wait on itself), so nothing here allocates. */
static int swap_pages(uint64_t start, uint64_t end, int mfd, unsigned char* resident) {
    size_t pages = (end - start) / PAGE;
    char here;
    /* this thread's own stack in the range would fault on itself: swap it unguarded */
    uint64_t sp = (uint64_t)(uintptr_t)&here;
    int guard = !(sp + 65536 > start && sp < end + 65536);
    if (guard) {
        struct sigaction now;
        if (sigaction(SIGSEGV, NULL, &now)) return -1;
        if (!(now.sa_flags & SA_SIGINFO) || now.sa_sigaction != swap_fault) {
            struct sigaction mine = {0};
            mine.sa_sigaction = swap_fault;
            mine.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
            sigemptyset(&mine.sa_mask);
            swap_before = now;
            if (sigaction(SIGSEGV, &mine, NULL)) return -1;
        }
        unsigned at = (__atomic_load_n(&swap_word, __ATOMIC_RELAXED) >> 1) % SWAP_RECENT;
        swap_lo[at] = start;
        swap_hi[at] = end;
        __atomic_add_fetch(&swap_word, 1, __ATOMIC_RELEASE); /* odd: slot `at` is this one */
        if (mprotect((void*)(uintptr_t)start, end - start, PROT_READ)) guard = -1;
    }
    int ok = 0;
    if (guard >= 0) {
        if (mincore((void*)(uintptr_t)start, end - start, resident)) memset(resident, 1, pages);
        ok = 1;
        for (size_t p = 0; p < pages && ok;) {
            if (!(resident[p] & 1)) {
                p++;
                continue;
            }
            size_t q = p;
            while (q < pages && (resident[q] & 1)) q++;
            ok = pwrite(mfd, (void*)(uintptr_t)(start + p * PAGE), (q - p) * PAGE,
                        (off_t)(p * PAGE)) >= 0;
            p = q;
        }
        /* on failure the pages go back to read-write, unswapped */
        if (ok && real_mmap((void*)(uintptr_t)start, end - start, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, mfd, 0) == MAP_FAILED)
            ok = 0;
        if (!ok && guard) mprotect((void*)(uintptr_t)start, end - start, PROT_READ | PROT_WRITE);
    }
    if (guard) {
        __atomic_add_fetch(&swap_word, 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &swap_word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    return ok ? 0 : -1;
}

/* Userptr registration: the range's pages become shared memfd pages of the same content
 * (pages never touched are zero and are not copied), so the server can map them. Pages a
 * memfd of ours already backs keep it, as long as /proc/self/maps says that one memfd still
 * backs the whole range: a later registration over part of a range, or memory the program
 * freed and got back, gets a new memfd instead of a stale one (a stale one was silently
 * wrong data: the GPU wrote pages the program no longer had). */
static int userptr_fd(uint64_t addr, uint64_t size, uint64_t* offset_in_fd) {
    uint64_t start = addr & ~(PAGE - 1), end = (addr + size + PAGE - 1) & ~(PAGE - 1);
    char* maps = read_maps();
    uint64_t off = 0;
    int have = maps ? userptr_backing(maps, start, end, &off) : -1;
    free(maps);
    if (have >= 0) {
        *offset_in_fd = off + (addr - start);
        return have;
    }
    if (nuserptrs == capuserptrs) {
        size_t cap = capuserptrs ? capuserptrs * 2 : 16;
        struct userptr* bigger = realloc(userptrs, cap * sizeof *userptrs);
        if (!bigger) return -1;
        userptrs = bigger;
        capuserptrs = cap;
    }
    int mfd = memfd_create("amdgpu-userptr", MFD_CLOEXEC);
    if (mfd < 0) return -1;
    struct stat st;
    unsigned char* resident = NULL;
    size_t rlen = ((end - start) / PAGE + PAGE - 1) & ~(PAGE - 1);
    if (ftruncate(mfd, (off_t)(end - start)) || fstat(mfd, &st)) goto fail;
    /* mincore's answer goes to pages of their own: from malloc they could lie in the range */
    resolve_mmap();
    resident = real_mmap(NULL, rlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (resident == MAP_FAILED) {
        resident = NULL;
        goto fail;
    }
    if (swap_pages(start, end, mfd, resident)) goto fail;
    munmap(resident, rlen);
    userptrs[nuserptrs++] = (struct userptr){(uint64_t)st.st_dev, (uint64_t)st.st_ino, mfd};
    *offset_in_fd = addr - start;
    return mfd;
fail:
    if (resident) munmap(resident, rlen);
    real_close(mfd);
    return -1;
}

/* Every page of [start, end) is mapped in this process (kfd_svm.c's svm_range_is_valid). */
static int range_mapped(uint64_t start, uint64_t end) {
    char* maps = read_maps();
    if (!maps) return 0;
    uint64_t at = start;
    for (const char* line = maps; *line && at < end;) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= at && at < hi) at = hi;
        const char* nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    free(maps);
    return at >= end;
}

static int forward(int fd, struct fdinfo* f, unsigned long request, char* arg) {
    uint32_t size = IOC_SIZE(request);
    if (IOC_TYPE(request) == KFD_TYPE && IOC_NR(request) == KFD_SVM && size >= 24) {
        /* the attrs[] follow the args in memory: they go (and come back) with them */
        uint64_t start = *(uint64_t*)arg, len = *(uint64_t*)(arg + 8);
        uint32_t nattr = *(uint32_t*)(arg + 20);
        if (nattr > SVM_MAX_ATTRS) {
            errno = EINVAL;
            return -1;
        }
        if (start && len && !(start % PAGE) && !(len % PAGE) && start + len > start &&
            !range_mapped(start, start + len)) {
            errno = EFAULT; /* as KFD: a range that is not all mapped memory */
            return -1;
        }
        size = 24 + 8 * nattr;
    }
    const void* extra = NULL;
    uint32_t extralen = 0;
    int send_fd = -1;
    uint64_t userptr_off = 0;
    if (IOC_TYPE(request) == KFD_TYPE) {
        uint32_t nr = IOC_NR(request);
        if ((nr == KFD_MAP || nr == KFD_UNMAP) && size >= 24) {
            extra = (void*)(uintptr_t)*(uint64_t*)(arg + 8);
            extralen = *(uint32_t*)(arg + 16) * 4;
        } else if (nr == KFD_ACQUIRE_VM && size >= 8) {
            /* the render node's fd means nothing to the server: send its minor */
            int dfd = *(int32_t*)arg;
            if (dfd < 0 || dfd >= MAX_FD || fds[dfd].kind != KIND_RENDER) {
                errno = EBADF;
                return -1;
            }
            *(uint32_t*)arg = fds[dfd].minor;
        } else if (nr == KFD_ALLOC && size >= 40 && (*(uint32_t*)(arg + 36) & ALLOC_USERPTR)) {
            send_fd = userptr_fd(*(uint64_t*)(arg + 24), *(uint64_t*)(arg + 8), &userptr_off);
            if (send_fd < 0) {
                errno = ENOMEM;
                return -1;
            }
            extra = &userptr_off;
            extralen = 8;
        }
    }
    struct req_head h = {OP_IOCTL, f->kind, request, size, extralen, send_fd >= 0,
                         (uint32_t)getpid()};
    struct rep_head rep;
    int rfds[16], nr = 0;
    if (exchange(fd, &h, arg, extra, send_fd, &rep, rfds, 16, &nr) ||
        finish_reply(fd, &rep, arg, size, rfds, nr)) {
        say_gone("no answer to an ioctl");
        errno = ENODEV;
        return -1;
    }
    for (int i = (int)rep.nkeys; i < nr; i++) real_close(rfds[i]);
    if (rep.ret) {
        errno = -rep.ret;
        return -1;
    }
    if (IOC_TYPE(request) == KFD_TYPE && IOC_NR(request) == KFD_FREE) {
        uint64_t handle = *(uint64_t*)arg;
        for (size_t i = 0; i < nkeys; i++)
            if (keys[i].handle == handle && handle) {
                real_close(keys[i].fd);
                keys[i] = keys[--nkeys];
                break;
            }
    } else if (IOC_TYPE(request) == KFD_TYPE && IOC_NR(request) == KFD_ALLOC && rep.nkeys) {
        keys[nkeys - 1].handle = *(uint64_t*)(arg + 16); /* the BO's key, freed with it */
    } else if (IOC_TYPE(request) == KFD_TYPE && IOC_NR(request) == KFD_SMI_EVENTS && size >= 8) {
        /* KFD's SMI event fd (the server checked the gpu_id), on a GPU that never has an
         * event: one end of a socket pair whose other end, kept here, never writes. As
         * KFD's fd: read says EAGAIN, poll never reports input, the 8-byte event mask the
         * program writes is taken (into the silent end, unread) */
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair)) return -1;
        if (pair[0] >= MAX_FD || fcntl(pair[0], F_SETFD, 0) ||
            fcntl(pair[0], F_SETFL, O_NONBLOCK)) {
            real_close(pair[0]);
            real_close(pair[1]);
            errno = EMFILE;
            return -1;
        }
        smi_peer[pair[0]] = pair[1] + 1;
        *(uint32_t*)(arg + 4) = (uint32_t)pair[0];
    }
    return 0;
}

EXPORT int ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    resolve_ioctl();
    if (fd < 0 || fd >= MAX_FD || !fds[fd].kind) return real_ioctl(fd, request, arg);
    struct fdinfo* f = &fds[fd];
    if (f->opener != getpid()) {
        /* KFD: "Only the process that opened /dev/kfd can use the file descriptor. Child
         * processes need to create their own KFD device context" (kfd_ioctl). A render node
         * works in a forked child on real amdgpu, but here its requests would go over the
         * parent's server connection and cross the parent's replies: EBADF, said once */
        if (f->kind == KIND_RENDER && !render_child_said) {
            render_child_said = 1;
            fprintf(stderr, "amdgpu emulated kernel: render node descriptor %d was opened by "
                    "process %d; this child (%d) gets EBADF on it: open "
                    "/dev/dri/renderD%u in the child\n", fd, (int)f->opener, (int)getpid(),
                    (unsigned)f->minor);
        }
        errno = EBADF;
        return -1;
    }
    if (f->kind == KIND_KFD && IOC_TYPE(request) == KFD_TYPE) {
        switch (IOC_NR(request)) {
        case KFD_WAIT_EVENTS:
            return wait_events(fd, f, arg);
        case KFD_SET_EVENT:
            return set_event(f, *(uint32_t*)arg, 1);
        case KFD_RESET_EVENT:
            return set_event(f, *(uint32_t*)arg, 0);
        case KFD_GET_CLOCK_COUNTERS: {
            uint64_t* c = arg;
            c[0] = c[1] = c[2] = now_ns();
            c[3] = 1000000000ull;
            return 0;
        }
        }
    }
    pthread_mutex_lock(&lock);
    int r = forward(fd, f, request, arg);
    int e = errno;
    pthread_mutex_unlock(&lock);
    errno = e;
    return r;
}

/* An HSA signal wait for this process's own provider (hsa/emulated EmulatedProvider):
 * ROCr's own wait spins 200 us on the signal before it sleeps in the kernel, and on a host
 * with fewer free cores than busy threads that spin keeps the device server's doorbell
 * thread off the CPU, so every round trip took the whole 200 us. This one yields the CPU
 * while it looks (sched_yield: the server's threads run), then sleeps on the events page
 * the server fires (FUTEX_WAIT on its sequence word). `signal` is the amd_signal_t (ROCr's
 * hsa_signal_t handle); conditions as hsa_signal_condition_t. Returns 1 with the value in
 * *value once the condition holds, 0 at the timeout, -1 where it cannot wait (not a user
 * signal, no events page): then the caller uses ROCr's own wait. */
EXPORT int amdgpu_kfd_shim_signal_wait(uint64_t signal, uint32_t condition, int64_t compare,
                                       uint64_t timeout_ns, uint32_t spin_us, int64_t* value) {
    const int64_t* kind = (const int64_t*)(uintptr_t)signal;
    const int64_t* v = (const int64_t*)(uintptr_t)(signal + 8);
    uint64_t mailbox = *(const volatile uint64_t*)(uintptr_t)(signal + 16);
    if (!signal || *kind != 1 || condition > 3) return -1; /* AMD_SIGNAL_KIND_USER */
    int kfd = -1;
    for (int i = 0; i < MAX_FD && kfd < 0; i++)
        if (fds[i].kind == KIND_KFD && fds[i].events) kfd = i;
    if (kfd < 0) return -1;
    uint32_t* seqp = (uint32_t*)fds[kfd].events;
    uint64_t start = now_ns();
    uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
    for (;;) {
        uint32_t seq = __atomic_load_n(seqp, __ATOMIC_SEQ_CST);
        int64_t x = __atomic_load_n(v, __ATOMIC_SEQ_CST);
        int holds = condition == 0 ? x == compare : condition == 1 ? x != compare
                  : condition == 2 ? x < compare : x >= compare;
        if (holds) {
            *value = x;
            return 1;
        }
        uint64_t now = now_ns();
        if (now >= deadline) {
            *value = x;
            return 0;
        }
        if (now - start < (uint64_t)spin_us * 1000ull) {
            sched_yield();
            continue;
        }
        if (!server_alive(kfd)) {
            say_gone("it closed the connection during a signal wait");
            _exit(70);
        }
        /* a signal without an event (no mailbox) is not announced: look again every ms */
        uint64_t left = deadline - now, slice = mailbox ? 100000000ull : 1000000ull;
        if (left > slice) left = slice;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        syscall(SYS_futex, seqp, FUTEX_WAIT, seq, &ts, NULL, 0);
    }
}

/* Whether this library is loaded (the provider's check); its wire protocol version. */
EXPORT int amdgpu_kfd_shim_version(void) { return 1; }
