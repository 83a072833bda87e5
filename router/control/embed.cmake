# Turns a file into a C header holding it as a NUL-terminated char array (hex bytes, so no escaping
# question arises). Run at build time: cmake -DIN=<file> -DOUT=<header> -DNAME=<symbol> -P embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Break the initializer into lines of 16 bytes to keep the generated file readable.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
file(WRITE ${OUT} "/* Generated from ${IN} by router/control/embed.cmake: do not edit. */\n"
     "static const char ${NAME}[] = {\n    ${bytes}0x00};\n"
     "#define ${NAME}_len ((size_t)${len})\n")
