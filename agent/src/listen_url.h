/* Listen URLs (listen_url.c). */
#ifndef VMA_LISTEN_URL_H
#define VMA_LISTEN_URL_H

/* True when url can only be reached from this machine: ipc/inproc, or a
 * tcp-like URL whose host is a loopback address or "localhost". Wildcards
 * ("*", "", 0.0.0.0, ::) and names are not. */
int vma_url_is_local(const char *url);

#endif /* VMA_LISTEN_URL_H */
