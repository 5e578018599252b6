# Draws the samples of `activitycast bench soak` (scripts/bench-soak.sh runs it):
#   gnuplot -e "csv='DIR/soak.csv'; png='DIR/soak.png'; summary='DIR/soak-summary.gp'" scripts/soak-plot.gp
# Four panels over the run's minutes: Redis used_memory with the least-squares line after the
# warm-up (grey), every worker's RSS and peak RSS against the limit, broadcast latency p50/p99
# with the two windows the p99 criterion compares (blue) and how busy the whole machine was, the
# consumer group's lag and pending.
load summary
set terminal pngcairo size 1100,1300 font "DejaVu Sans,10" noenhanced
set output png
set datafile separator ","
set grid lc rgb "#dddddd"
set key top left Left reverse opaque box lc rgb "#bbbbbb"
set lmargin 12
set rmargin 4
set xrange [0:duration/60.0]
set format x "%g"
set multiplot layout 4,1 title sprintf("ActivityCast soak (%g min, %d workers): %s", duration/60.0, workers, verdict) font ",13"

warm = "fillcolor rgb '#eeeeee' fillstyle solid 1.0 noborder behind"
set object 1 rectangle from 0, graph 0 to warmup/60.0, graph 1 @warm
set label 1 "warm-up" at graph 0.005, graph 0.06 left tc rgb "#777777" front

set title "Redis used_memory (INFO memory)"
set ylabel "MB"
set yrange [0:*]
plot csv skip 1 using ($1/60):2 with linespoints pt 7 ps 0.6 lw 2 lc rgb "#1f77b4" title "used_memory", \
     [warmup/60.0:duration/60.0] intercept + slope*x with lines dt 2 lw 2 lc rgb "#d62728" \
     title sprintf("least squares after warm-up: %+.2f MB/min (limit < %g)", slope, slope_limit)

set title "Workers' memory (/proc/PID/status)"
set key bottom right
set ylabel "MiB"
set yrange [0:*]
plot for [i=1:workers] csv skip 1 using ($1/60):(column(15 + 2*i)) with lines lw 2 lc i title sprintf("worker %d RSS (VmRSS)", i), \
     for [i=1:workers] csv skip 1 using ($1/60):(column(16 + 2*i)) with lines dt 2 lw 1.5 lc i title sprintf("worker %d peak (VmHWM)", i), \
     csv skip 1 using ($1/60):14 with lines lw 1 lc rgb "#999999" title "the bench's own RSS", \
     rss_limit with lines dt 3 lw 2 lc rgb "#d62728" title sprintf("limit %g MiB", rss_limit)

set key top left
set title sprintf("Broadcast latency, XADD to the sandbox's receipt (first broadcast of each score); p99 over the blue windows: first %.2f ms, last %.2f ms", p99_first, p99_last)
set ylabel "ms (log scale)"
set logscale y
set yrange [*:*]
set offsets 0, 0, graph 0.15, 0
set object 2 rectangle from warmup/60.0, graph 0 to (warmup + window)/60.0, graph 1 fillcolor rgb "#dce6f7" fillstyle solid 1.0 noborder behind
set object 3 rectangle from (duration - window)/60.0, graph 0 to duration/60.0, graph 1 fillcolor rgb "#dce6f7" fillstyle solid 1.0 noborder behind
set y2label "cores"
set y2range [0:cores * 1.2]
set y2tics
plot csv skip 1 using ($1/60):9 with linespoints pt 7 ps 0.5 lw 2 lc rgb "#2ca02c" title "p50", \
     csv skip 1 using ($1/60):10 with linespoints pt 7 ps 0.5 lw 2 lc rgb "#ff7f0e" title "p99", \
     csv skip 1 using ($1/60):15 axes x1y2 with lines lw 1 lc rgb "#999999" title "machine busy (cores, right axis)"
unset y2label
unset y2tics
unset object 2
unset object 3
unset logscale y
set offsets 0, 0, 0, 0

set title "Consumer group: lag and pending (feeds and registrations; pending includes fan-out slices)"
set ylabel "entries"
set xlabel "minutes"
set yrange [0:*]
plot csv skip 1 using ($1/60):6 with linespoints pt 7 ps 0.5 lw 2 lc rgb "#9467bd" title "lag (XINFO GROUPS)", \
     csv skip 1 using ($1/60):7 with linespoints pt 7 ps 0.5 lw 2 lc rgb "#8c564b" title "pending"
unset multiplot
