/* TCP connection facts from the kernel: see sockinfo.h. Kept apart because <linux/tcp.h>, which has the
 * fields glibc's <netinet/tcp.h> lacks, cannot be included with it. */
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "err.h"
#include "sockinfo.h"

int pdr_sock_bytes_acked(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return errno == EOPNOTSUPP || errno == ENOPROTOOPT ? PDR_ENOTSUP : PDR_EIO;
    if (len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked))
        return PDR_ENOTSUP;
    *out = ti.tcpi_bytes_acked;
    return 0;
}
