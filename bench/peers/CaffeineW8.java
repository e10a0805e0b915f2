// SPDX-License-Identifier: MIT
// W8 cache peer: Caffeine (Debian's libcaffeine-java 2.6.2) with
// expireAfterWrite(60 s), no size limit, driven exactly like bench/w8_cache.c:
// 1e6 keys "key:<i>", Zipf(0.99) samples from the same xorshift64 generator
// and seeds, mapped through the same random permutation, 2^20 precomputed
// samples per thread, 90% get / 10% put and 100% get, T threads, medians.
// Values are preallocated boxed integers (a put of a live key stores the
// same object again, as tw_cache's driver stores the same pointer).
// Output lines: caffeine,<mix>,<threads>,<ops per second>,<process CPU ns per op>
//
//   java -cp caffeine.jar:. CaffeineW8 [keys] [seconds] [reps] [threads,...]
import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

public final class CaffeineW8 {
    static final int SAMPLES = 1 << 20;
    static int nkeys = 1000000;
    static String[] keys;
    static Integer[] values;
    static int[] perm;
    static int[][] samples;

    static long s; // xorshift64 state

    static long xs() {
        long x = s;
        x ^= x << 13;
        x ^= x >>> 7;
        x ^= x << 17;
        return s = x;
    }

    static long umod(long x, long m) {
        return Long.remainderUnsigned(x, m);
    }

    static void makeKeys() {
        s = 88172645463325252L;
        keys = new String[nkeys];
        values = new Integer[nkeys];
        perm = new int[nkeys];
        for (int i = 0; i < nkeys; i++) {
            keys[i] = "key:" + i;
            values[i] = i + 1;
            perm[i] = i;
        }
        for (int i = nkeys - 1; i > 0; i--) {
            int j = (int) umod(xs(), i + 1);
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }

    static void makeSamples(int writePct, int streams) {
        double[] cdf = new double[nkeys];
        double sum = 0;
        for (int i = 0; i < nkeys; i++) {
            sum += 1.0 / Math.pow(i + 1, 0.99);
            cdf[i] = sum;
        }
        samples = new int[streams][SAMPLES];
        for (int t = 0; t < streams; t++) {
            s = 0x9e3779b97f4a7c15L * (t + 1);
            for (int k = 0; k < SAMPLES; k++) {
                double u = (double) (xs() >>> 11) / 9007199254740992.0 * sum;
                int lo = 0, hi = nkeys - 1;
                while (lo < hi) {
                    int mid = (lo + hi) >>> 1;
                    if (cdf[mid] < u) lo = mid + 1;
                    else hi = mid;
                }
                int w = umod(xs(), 100) < writePct ? 0x80000000 : 0;
                samples[t][k] = perm[lo] | w;
            }
        }
    }

    static double cpuPerOp;

    static long procCpuNs() {
        return ((com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static double runMix(Cache<String, Integer> c, int threads, double seconds) throws Exception {
        AtomicBoolean stop = new AtomicBoolean(false);
        CyclicBarrier start = new CyclicBarrier(threads + 1);
        long[] ops = new long[threads];
        Thread[] th = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            final int id = i;
            th[i] = new Thread(() -> {
                int[] smp = samples[id];
                int pos = 0;
                long n = 0;
                long sink = 0;
                try {
                    start.await();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
                while (!stop.get()) {
                    for (int j = 0; j < 1024; j++) {
                        int sm = smp[pos++ & (SAMPLES - 1)];
                        int k = sm & 0x7fffffff;
                        if (sm < 0) {
                            c.put(keys[k], values[k]);
                        } else {
                            Integer v = c.getIfPresent(keys[k]);
                            if (v != null) sink += v;
                        }
                    }
                    n += 1024;
                }
                ops[id] = n;
                if (sink == 42) System.out.print(""); // keeps the reads alive
            });
            th[i].start();
        }
        start.await();
        long t0 = System.nanoTime(), c0 = procCpuNs();
        Thread.sleep((long) (seconds * 1000));
        stop.set(true);
        long total = 0;
        for (int i = 0; i < threads; i++) {
            th[i].join();
            total += ops[i];
        }
        long t1 = System.nanoTime();
        cpuPerOp = (double) (procCpuNs() - c0) / Math.max(total, 1);
        return total / ((t1 - t0) / 1e9);
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0) nkeys = (int) Double.parseDouble(args[0]);
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 2;
        int reps = args.length > 2 ? Integer.parseInt(args[2]) : 3;
        String[] tl = (args.length > 3 ? args[3] : "1,2,4,8,16").split(",");
        int[] threads = new int[tl.length];
        int streams = 1;
        for (int i = 0; i < tl.length; i++) {
            threads[i] = Integer.parseInt(tl[i]);
            streams = Math.max(streams, threads[i]);
        }
        makeKeys();
        for (int writes = 10; writes >= 0; writes -= 10) {
            makeSamples(writes, streams);
            Cache<String, Integer> c = Caffeine.newBuilder()
                .expireAfterWrite(60, TimeUnit.SECONDS).build();
            for (int i = 0; i < nkeys; i++) c.put(keys[i], values[i]);
            // warm-up: let the JIT compile the loops before timing
            runMix(c, 1, Math.min(seconds, 1.0));
            for (int t : threads) {
                double[] r = new double[reps], cp = new double[reps];
                for (int i = 0; i < reps; i++) {
                    r[i] = runMix(c, t, seconds);
                    cp[i] = cpuPerOp;
                }
                java.util.Arrays.sort(r);
                java.util.Arrays.sort(cp);
                double m = reps % 2 == 1 ? r[reps / 2] : (r[reps / 2 - 1] + r[reps / 2]) / 2;
                double mc = reps % 2 == 1 ? cp[reps / 2] : (cp[reps / 2 - 1] + cp[reps / 2]) / 2;
                System.out.printf("caffeine,%s,%d,%.0f,%.1f%n", writes > 0 ? "90/10" : "100/0", t, m,
                                  mc);
                System.out.flush();
            }
        }
    }
}
