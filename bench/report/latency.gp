# Allreduce latency vs message size (log-log), error bars = min-max of the round medians.
eval("set terminal ".term." size 960,640")
set output outfile
set title "float32 allreduce latency, np=2 on localhost (lower is better)"
set logscale xy
set xrange [xmin/1.4:xmax*1.4]
set grid
set key below box
set xlabel "message size" offset 0,0.6
set ylabel "latency, µs (slower rank)"
set datafile missing "-"
plot for [i=0:ncols-1] datafile using 1:(column(2+3*i)):(column(3+3*i)):(column(4+3*i)) \
       with yerrorlines lw 2 pt 7 title columnhead(2+3*i)
