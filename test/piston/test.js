const sorted = [3, 1, 2].toSorted();
console.log(sorted.join('') === '123' ? 'OK' : 'FAIL');
