"""autograd.builtins: the libraries under test trace Python containers as pytrees, so autograd's
container boxes and isinstance/type are Python's own."""
import builtins

dict = builtins.dict
isinstance = builtins.isinstance
list = builtins.list
tuple = builtins.tuple
type = builtins.type
