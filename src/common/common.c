/* SPDX-License-Identifier: MIT */
/* Error strings and version: the parts of twheel shared by every layer. */
#include "twheel/common.h"

#define TW_STR_(x) #x
#define TW_STR(x) TW_STR_(x)

const char *tw_strerror(int err)
{
    switch (err) {
#define TW_ERRNO_TEXT_(name, value, text) \
    case TW_##name:                       \
        return text;
        TW_ERRNO_MAP(TW_ERRNO_TEXT_)
#undef TW_ERRNO_TEXT_
    case 0:
        return "success";
    default:
        return "unknown error";
    }
}

const char *tw_err_name(int err)
{
    switch (err) {
#define TW_ERRNO_NAME_(name, value, text) \
    case TW_##name:                       \
        return "TW_" #name;
        TW_ERRNO_MAP(TW_ERRNO_NAME_)
#undef TW_ERRNO_NAME_
    case 0:
        return "TW_OK";
    default:
        return "TW_UNKNOWN";
    }
}

const char *tw_version_string(void)
{
    return TW_STR(TW_VERSION_MAJOR) "." TW_STR(TW_VERSION_MINOR) "." TW_STR(TW_VERSION_PATCH);
}

unsigned tw_version(void)
{
    return TW_VERSION_HEX;
}
