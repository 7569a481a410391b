/* Dropping every capability the child holds in its user namespace: the
 * bounding set (so no exec can regain any), the ambient and inheritable
 * sets, then permitted/effective. Securebits are locked first so a later
 * setuid(0)-style transition cannot bring root's privileges back. */
#include <errno.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch.h"

int caps_drop_all(void)
{
        /* Needs CAP_SETPCAP, so before the capsets are cleared. */
        if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                             SECBIT_NO_SETUID_FIXUP_LOCKED |
                                             SECBIT_KEEP_CAPS_LOCKED) < 0)
                return -errno;
        for (int cap = 0; cap <= 63; cap++) {
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
                        if (errno == EINVAL)
                                break; /* past the kernel's last capability */
                        return -errno;
                }
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
        struct __user_cap_data_struct data[2] = {{0}};
        if (syscall(SYS_capset, &hdr, data) < 0)
                return -errno;
        return 0;
}
