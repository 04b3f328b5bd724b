package stage_test

import (
	"context"
	"fmt"

	"github.com/pubsubflow/pubsubflow/stage"
)

// An Eager stage runs its hook on receipt, before downstream asks: here
// downstream has not read anything yet, and all three elements are already
// "tracked" because the bound (3) has room for them.
func ExampleEager() {
	g := stage.NewGroup(context.Background())
	in := make(chan string)
	tracked := make(chan string, 3)
	e := &stage.Eager[string]{
		Bound:     3,
		OnReceive: func(_ context.Context, v string) error { tracked <- v; return nil },
	}
	out := e.Run(g, in)
	for _, v := range []string{"a", "b", "c"} {
		in <- v // accepted at once: the stage buffers it
	}
	close(in)
	fmt.Println(<-tracked, <-tracked, <-tracked)
	for v := range out {
		fmt.Print(v, " ")
	}
	fmt.Println(g.Wait())
	// Output:
	// a b c
	// a b c <nil>
}

// A Group owns a pipeline's goroutines: the first error cancels the rest
// and is what Wait returns.
func ExampleGroup() {
	g := stage.NewGroup(context.Background())
	g.Go(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	g.Go(func(context.Context) error { return fmt.Errorf("stage failed") })
	fmt.Println(g.Wait())
	// Output: stage failed
}

// A flow of your own: every send and receive in a select on the group's
// context (Send, Recv), the output closed when the input ends, the first
// error failing the group.
func ExampleFlowFunc() {
	g := stage.NewGroup(context.Background())
	in := make(chan int)
	double := stage.FlowFunc[int, int](func(g *stage.Group, in <-chan int) <-chan int {
		out := make(chan int)
		g.Go(func(ctx context.Context) error {
			defer close(out)
			for {
				v, ok := stage.Recv(ctx, in)
				if !ok {
					return nil
				}
				if !stage.Send(ctx, out, 2*v) {
					return nil
				}
			}
		})
		return out
	})
	out := double.Run(g, in)
	go func() {
		defer close(in)
		for v := range 3 {
			in <- v
		}
	}()
	for v := range out {
		fmt.Print(v, " ")
	}
	fmt.Println(g.Wait())
	// Output: 0 2 4 <nil>
}
