/* The sandbox service's API is public: include/codecage/service.h. */
#include "codecage/service.h"
