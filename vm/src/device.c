/* Device-independent helpers of the device interface. */
#include "vm/device.h"

#include <stdio.h>

void vm_device_destroy(vm_device_t *dev) {
  if (dev && dev->ops && dev->ops->destroy) dev->ops->destroy(dev);
}

char *vm_device_str(const vm_device_t *dev, char *buf, unsigned buflen) {
  if (!buf || buflen == 0) return buf;
  if (!dev) {
    snprintf(buf, buflen, "(no device)");
    return buf;
  }
  switch (dev->type) {
    case VM_DEVICE_CPU: snprintf(buf, buflen, "cpu:%d", (int)dev->id); break;
    case VM_DEVICE_OPENCL: snprintf(buf, buflen, "opencl:%d", (int)dev->id); break;
    default:
      /* DLPack code for types this build does not know by name. */
      snprintf(buf, buflen, "device%d:%d", (int)dev->type, (int)dev->id);
      break;
  }
  return buf;
}
