type Status = 'OK' | 'FAIL';
const result = { status: 'OK' } satisfies { status: Status };
console.log(result.status);
