// A C++ library as any program may load: it allocates inside libstdc++
// (strings, streams, locales, shared pointers) and frees outside it. When
// libstdc++'s own operator new is bound to another allocator (as happens
// when libstdc++ is first loaded as a dependency of Debian's jemalloc), the
// frees here abort with "free(): invalid pointer".
#include <locale>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern "C" int cxx_user_roundtrip(void)
{
    std::vector<std::string> items;
    for (int i = 0; i < 100; i++) {
        std::ostringstream os;
        os << "item " << i << std::string(100, 'x');
        items.push_back(os.str());
    }
    std::locale loc("");
    auto shared = std::make_shared<std::string>(std::to_string(42) +
                                                std::string(200, 'y'));
    return (int)(items.size() + shared->size());
}
