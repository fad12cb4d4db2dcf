/* Enter the test Apptainer's root filesystem and run its apptainer as the caller (see ./provision).
 *
 * Installed setuid root by provision, so an unprivileged caller runs apptainer as on a site with a
 * setuid install: a private mount namespace in which the rootfs is the root (pivot_root; apptainer's
 * starter refuses a plain chroot), the host's directories a caller needs bound in, then the caller's
 * own uid and gid back before apptainer starts. Test machines only: it runs nothing but that apptainer.
 *
 *   enter APPTAINER-ARGUMENTS...   (ROOTFS, HOST_PATHS and DROP_CAPS are compiled in by provision)
 * Environment: ZK_KEEP_<NAME> restores NAME, which glibc strips from a setuid program's environment
 * (LD_LIBRARY_PATH, LD_PRELOAD, TMPDIR); ZEROKIT_APPTAINER_BIND adds host paths (colon-separated).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef ROOTFS
#error "compile with -DROOTFS=\"/path/to/rootfs\" -DHOST_PATHS=\"a:b\""
#endif

extern char **environ;

static void die(const char *what, const char *path) {
    fprintf(stderr, "apptainer (test wrapper): %s %s: %s\n", what, path ? path : "", strerror(errno));
    exit(255);
}

static void bind_into(const char *host, int recursive) {
    struct stat st;
    char target[PATH_MAX];
    if (stat(host, &st) != 0) return; /* absent on this host: nothing to bind */
    snprintf(target, sizeof target, "%s%s", ROOTFS, host);
    if (S_ISDIR(st.st_mode)) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", target);
        for (char *p = dir + strlen(ROOTFS) + 1; *p; p++)  /* mkdir -p */
            if (*p == '/') { *p = 0; mkdir(dir, 0755); *p = '/'; }
        mkdir(target, 0755);
    } else if (access(target, F_OK) != 0) {
        FILE *f = fopen(target, "a");
        if (!f) die("cannot create", target);
        fclose(f);
    }
    if (mount(host, target, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL) != 0) die("cannot bind", host);
}

static void bind_list(const char *list) {
    char *copy = strdup(list ? list : ""), *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save))
        if (p[0] == '/') bind_into(p, 1);
    free(copy);
}

static void restore_environment(void) {
    static const char *kept[] = {"LD_LIBRARY_PATH", "LD_PRELOAD", "TMPDIR"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        char name[64];
        snprintf(name, sizeof name, "ZK_KEEP_%s", kept[i]);
        const char *value = getenv(name);
        if (value) setenv(kept[i], value, 1);
        unsetenv(name);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    uid_t uid = getuid();
    gid_t gid = getgid();
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
    if (unshare(CLONE_NEWNS) != 0) die("unshare", "(is the wrapper setuid root? run provision as root)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("cannot make / private", NULL);
    if (mount(ROOTFS, ROOTFS, NULL, MS_BIND | MS_REC, NULL) != 0) die("cannot bind", ROOTFS);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/proc", ROOTFS);
    if (mount("proc", path, "proc", 0, NULL) != 0) die("cannot mount proc on", path);
    bind_into("/sys", 1);
    bind_into("/dev", 1);
    snprintf(path, sizeof path, "%s/dev/fuse", ROOTFS);  /* a 0666 node, as on a site (see provision) */
    if (mount(ROOTFS "/../fuse", path, NULL, MS_BIND, NULL) != 0) die("cannot bind a fuse node over", path);
    bind_list(HOST_PATHS);
    bind_list(cwd);
    bind_list(getenv("ZEROKIT_APPTAINER_BIND"));
    /* The caller's users and name resolution are the host's. */
    bind_list("/etc/passwd:/etc/group:/etc/hosts:/etc/resolv.conf:/run/docker.sock");
    snprintf(path, sizeof path, "%s/.oldroot", ROOTFS);
    mkdir(path, 0700);
    if (syscall(SYS_pivot_root, ROOTFS, path) != 0) die("pivot_root into", ROOTFS);
    if (chdir("/") != 0 || umount2("/.oldroot", MNT_DETACH) != 0) die("cannot detach the old root", NULL);
    if (chdir(cwd) != 0 && chdir("/") != 0) die("chdir", cwd);
    if (setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) die("cannot drop privileges", NULL);
    restore_environment();
    if (uid == 0 && !getenv("APPTAINER_DROP_CAPS") && DROP_CAPS[0]) setenv("APPTAINER_DROP_CAPS", DROP_CAPS, 1);
    argv[0] = "apptainer";
    execve("/usr/bin/apptainer", argv, environ);
    die("cannot run", "/usr/bin/apptainer");
}
