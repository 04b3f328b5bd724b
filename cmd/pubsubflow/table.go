package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table prints rows of cells aligned in columns.
type table struct {
	rows [][]string
}

func (t *table) row(cells ...any) {
	r := make([]string, len(cells))
	for i, c := range cells {
		r[i] = fmt.Sprint(c)
	}
	t.rows = append(t.rows, r)
}

func (t *table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// seconds formats a duration as seconds with one decimal ("15.7s").
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// millis formats a latency in milliseconds.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func rate(perSecond float64) string { return fmt.Sprintf("%.0f msg/s", perSecond) }
