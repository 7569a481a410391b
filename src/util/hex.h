/* Hexadecimal digits, for the parsers that meet them (percent-encoding in
 * URL paths, chunk sizes, IPv6 literals). */
#ifndef CODECAGE_UTIL_HEX_H
#define CODECAGE_UTIL_HEX_H

/* The value of hex digit c (either case), or -1. */
static inline int hex_digit_value(unsigned char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

#endif
