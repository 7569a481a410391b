/* Unit tests for host uid slots (core/userns.c): two processes taking
 * slots at the same time never get the same one, and a process never gets a
 * slot twice while it holds it; a released slot is free for others. Needs
 * root (only root maps other uids); skipped otherwise. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/userns.h"
#include "harness.h"
#include "util/error.h"

#define TAKEN 64

static int take(struct id_slot *slots, int n)
{
        for (int i = 0; i < n; i++) {
                struct cage_error err = {0};
                if (cage_id_slot_acquire(&slots[i], &err) < 0 || !slots[i].held)
                        return -1;
        }
        return 0;
}

static bool distinct(const uid_t *a, int n, const uid_t *b, int m)
{
        for (int i = 0; i < n; i++)
                for (int j = 0; j < m; j++)
                        if ((a != b || i != j) && a[i] == b[j])
                                return false;
        return true;
}

/* Whether a lock of its own on slot's byte succeeds (then drops it). */
static bool can_lock(unsigned slot)
{
        int fd = open(UID_SLOT_FILE, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return false;
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};
        bool ok = fcntl(fd, F_OFD_SETLK, &fl) == 0;
        close(fd);
        return ok;
}

TEST(two_processes_never_share_a_slot)
{
        if (geteuid() != 0)
                SKIP("uid slots need root");
        int ready[2], report[2];
        CHECK(pipe(ready) == 0 && pipe(report) == 0);
        pid_t pid = fork();
        if (pid == 0) {
                struct id_slot mine[TAKEN];
                uid_t uids[TAKEN];
                if (take(mine, TAKEN) < 0)
                        _exit(2);
                for (int i = 0; i < TAKEN; i++)
                        uids[i] = mine[i].host_uid;
                char c;
                /* Hold them until the parent took its own, then report. */
                if (write(report[1], uids, sizeof(uids)) != sizeof(uids) ||
                    read(ready[0], &c, 1) != 1)
                        _exit(3);
                _exit(0);
        }
        uid_t theirs[TAKEN];
        CHECK(read(report[0], theirs, sizeof(theirs)) == sizeof(theirs));
        struct id_slot mine[TAKEN];
        uid_t uids[TAKEN];
        CHECK(take(mine, TAKEN) == 0);
        for (int i = 0; i < TAKEN; i++)
                uids[i] = mine[i].host_uid;
        CHECK(distinct(uids, TAKEN, uids, TAKEN));     /* never twice here */
        CHECK(distinct(uids, TAKEN, theirs, TAKEN));   /* never one of theirs */
        CHECK(distinct(theirs, TAKEN, theirs, TAKEN)); /* nor twice there */
        for (int i = 0; i < TAKEN; i++)                /* held for every process to see */
                CHECK(!can_lock(theirs[i] - UID_SLOT_BASE) && !can_lock(uids[i] - UID_SLOT_BASE));
        CHECK(write(ready[1], "x", 1) == 1);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* A released slot is free again: another open file can lock it. */
        unsigned freed = mine[TAKEN / 2].host_uid - UID_SLOT_BASE;
        CHECK(!can_lock(freed));
        cage_id_slot_release(&mine[TAKEN / 2]);
        CHECK(!mine[TAKEN / 2].held);
        CHECK(can_lock(freed));
        for (int i = 0; i < TAKEN; i++)
                cage_id_slot_release(&mine[i]);
}

RUN_TESTS(T(two_processes_never_share_a_slot))
