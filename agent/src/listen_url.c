/* Where a listen URL can be reached from (listen_url.h). */
#include "listen_url.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>

int vma_url_is_local(const char *url) {
  if (!url) return 0;
  if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "inproc://", 9) == 0 ||
      strncmp(url, "abstract://", 11) == 0)
    return 1;
  const char *sep = strstr(url, "://");
  if (!sep) return 0;
  const char *host = sep + 3;
  char buf[256];
  size_t n;
  if (*host == '[') { /* [v6]:port */
    const char *end = strchr(host, ']');
    if (!end) return 0;
    n = (size_t)(end - host - 1);
    if (n >= sizeof(buf)) return 0;
    memcpy(buf, host + 1, n);
  } else {
    const char *end = strrchr(host, ':');
    n = end ? (size_t)(end - host) : strlen(host);
    if (n >= sizeof(buf)) return 0;
    memcpy(buf, host, n);
  }
  buf[n] = '\0';
  if (strcasecmp(buf, "localhost") == 0) return 1;
  struct in_addr v4;
  if (inet_pton(AF_INET, buf, &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  struct in6_addr v6;
  if (inet_pton(AF_INET6, buf, &v6) == 1) return memcmp(&v6, &in6addr_loopback, sizeof(v6)) == 0;
  return 0;
}
