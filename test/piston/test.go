package main

import "fmt"

func first[T any](xs []T) T {
	return xs[0]
}

func main() {
	fmt.Println(first([]string{"OK"}))
}
