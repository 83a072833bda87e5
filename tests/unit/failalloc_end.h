/* The end of the sources compiled under failalloc.h: the test's own code allocates normally. */
#undef malloc
#undef calloc
#undef realloc
