/* A program outside the tree that uses only the installed public API. */
#include <stdio.h>
#include <string.h>

#include <strata/strata.h>

int main(void)
{
    char header[32];
    snprintf(header, sizeof(header), "%d.%d.%d", STRATA_VERSION_MAJOR,
             STRATA_VERSION_MINOR, STRATA_VERSION_PATCH);
    printf("strata %s (header %s): %s\n", strata_version_string(), header,
           strata_strerror(STRATA_ERR_TIMEOUT));
    return strcmp(header, strata_version_string()) != 0;
}
