/* Classify the digits test set with the library digits_predict.py built:
 *   ./main build/           (reads build/predict.safetensors, build/test_x.f32, build/test_y.i32)
 * Nothing but libpredict.so and the C library: the trained weights come from the
 * safetensors file (a JSON header, then the raw arrays), read with the small reader below. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "predict.h"

static char *read_file(const char *dir, const char *name, size_t *size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc(*size + 1);
    if (!data || fread(data, 1, *size, f) != *size) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
    data[*size] = 0;
    fclose(f);
    return data;
}

/* The data of tensor `name` in a safetensors file held in memory, checked to be `nbytes`. */
static const void *tensor(const char *file, size_t size, const char *name, size_t nbytes) {
    uint64_t header;
    memcpy(&header, file, 8);                            /* little-endian length of the JSON header */
    char key[256];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *at = strstr(file + 8, key);
    const char *offsets = at ? strstr(at, "\"data_offsets\":[") : NULL;
    unsigned long long begin, end;
    if (!offsets || offsets > file + 8 + header
        || sscanf(offsets + strlen("\"data_offsets\":["), "%llu,%llu", &begin, &end) != 2
        || end - begin != nbytes || 8 + header + end > size) {
        fprintf(stderr, "the weights have no tensor %s of %zu bytes\n", name, nbytes);
        exit(1);
    }
    return file + 8 + header + begin;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "build";
    size_t wsize, xsize, ysize;
    char *weights = read_file(dir, "predict.safetensors", &wsize);
    const float *x = (const float *)read_file(dir, "test_x.f32", &xsize);
    const int32_t *y = (const int32_t *)read_file(dir, "test_y.i32", &ysize);
    if (xsize != sizeof(float) * PREDICT_X_SIZE || ysize != sizeof(int32_t) * PREDICT_OUTPUT_SIZE) {
        fprintf(stderr, "the test set does not have the shape the library was built for\n");
        return 1;
    }
    /* The library's arguments: the images, then each trained variable by name. */
    predict_args in = {
        .x = x,
        .hidden1_kernel = tensor(weights, wsize, "hidden1/kernel", sizeof(float) * PREDICT_HIDDEN1_KERNEL_SIZE),
        .hidden1_bias = tensor(weights, wsize, "hidden1/bias", sizeof(float) * PREDICT_HIDDEN1_BIAS_SIZE),
        .hidden2_kernel = tensor(weights, wsize, "hidden2/kernel", sizeof(float) * PREDICT_HIDDEN2_KERNEL_SIZE),
        .hidden2_bias = tensor(weights, wsize, "hidden2/bias", sizeof(float) * PREDICT_HIDDEN2_BIAS_SIZE),
        .logits_kernel = tensor(weights, wsize, "logits/kernel", sizeof(float) * PREDICT_LOGITS_KERNEL_SIZE),
        .logits_bias = tensor(weights, wsize, "logits/bias", sizeof(float) * PREDICT_LOGITS_BIAS_SIZE),
    };
    static int32_t labels[PREDICT_OUTPUT_SIZE];
    predict_results out = {labels};
    int rc = predict(&in, &out, NULL);
    if (rc != PREDICT_OK) {
        fprintf(stderr, "predict failed with code %d\n", rc);
        return 1;
    }
    int right = 0;
    for (int i = 0; i < PREDICT_OUTPUT_SIZE; i++) right += labels[i] == y[i];
    printf("test accuracy %.2f%% (%d of %d) from C\n", 100.0 * right / PREDICT_OUTPUT_SIZE, right,
           PREDICT_OUTPUT_SIZE);
    return 0;
}
